package nsdir_test

import (
	"testing"

	"ollie/ns/nsdir"
)

// The directory must be the one plan9port's namespace(1) names, or 9p and
// 9pfuse would not find the service.
func TestNamespaceDir(t *testing.T) {
	t.Setenv("USER", "glenda")
	tests := []struct {
		namespace, display, want string
	}{
		{"/run/ns", ":1", "/run/ns"},
		{"", "", "/tmp/ns.glenda.:0"},
		{"", ":0.0", "/tmp/ns.glenda.:0"},
		{"", ":1.2", "/tmp/ns.glenda.:1.2"},
		{"", "host:10.0", "/tmp/ns.glenda.host:10"},
		{"", "/private/tmp/launch/org.xquartz:0", "/tmp/ns.glenda._private_tmp_launch_org.xquartz:0"},
	}
	for _, tt := range tests {
		t.Setenv("NAMESPACE", tt.namespace)
		t.Setenv("DISPLAY", tt.display)
		if got := nsdir.NamespaceDir(); got != tt.want {
			t.Errorf("NAMESPACE=%q DISPLAY=%q: %s, want %s", tt.namespace, tt.display, got, tt.want)
		}
	}
	t.Setenv("NAMESPACE", "/run/ns")
	if got := nsdir.SocketPath(); got != "/run/ns/ollie" {
		t.Errorf("SocketPath() = %s, want /run/ns/ollie", got)
	}
}
