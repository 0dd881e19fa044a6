package inventory_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"ollie/internal/sshlab"
	"ollie/tunnel"
	"ollie/tunnel/inventory"
)

// TestInventoryReachesHosts: hosts that the ssh config given to tunnel
// does not know are reached through what the inventory says alone
// (address, port, user, key), and one through a jump host given in
// ansible_ssh_common_args, which is an alias of that ssh config.
func TestInventoryReachesHosts(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{Hosts: 3})
	h11, h12, h13 := l.Host(0), l.Host(1), l.Host(2)
	inv := filepath.Join(t.TempDir(), "hosts.ini")
	line := func(name string, h *sshlab.Host, extra string) string {
		return fmt.Sprintf("%s ansible_host=%s ansible_port=%d ansible_user=%s ansible_ssh_private_key_file=%s %s\n", name, h.Addr, h.Port, h.User, l.ClientKey, extra)
	}
	text := "[apps]\n" + line("app1", h11, "") + line("app2", h12, "") +
		"[behind]\n" + line("app3", h13, "ansible_ssh_common_args='-o StrictHostKeyChecking=no -J "+h12.Name+"'")
	if err := os.WriteFile(inv, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"app1", "app2", "app3"} {
		if tg, err := tunnel.Resolve(name, tunnel.Options{ConfigFile: l.ConfigFile}); err != nil || tg.HostName != name || tg.Port != 22 {
			t.Fatalf("the lab's ssh config knows %s: %+v %v", name, tg, err)
		}
	}
	backends(t, func(t *testing.T, ansible string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hosts, source, err := inventory.Resolve(ctx, []string{"@all"}, inventory.Options{Inventory: inv, SSHConfig: l.ConfigFile, AnsibleInventory: ansible})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(source)
		want := []string{"app1", "app2", "app3"}
		var got []string
		for _, h := range hosts {
			got = append(got, h.Name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("@all = %q, want %q", got, want)
		}
		users := []string{h11.User, h12.User, h13.User}
		clients := make([]*tunnel.Client, len(hosts))
		for i, h := range hosts {
			o := tunnel.Options{ConfigFile: l.ConfigFile, KnownHosts: []string{l.KnownHosts}, Override: h.Override}
			c, err := tunnel.Dial(ctx, h.Name, o)
			if err != nil {
				t.Fatalf("Dial %s with %+v: %v", h.Name, h.Override, err)
			}
			defer c.Close()
			clients[i] = c
			out, err := c.Run(ctx, "id -un", nil)
			if err != nil {
				t.Fatalf("%s: id -un: %v", h.Name, err)
			}
			if strings.TrimSpace(string(out)) != users[i] {
				t.Errorf("%s: id -un = %q, want %s", h.Name, out, users[i])
			}
		}
		app3 := clients[2]
		if j := app3.Target().ProxyJump; !reflect.DeepEqual(j, []string{h12.Name}) {
			t.Fatalf("app3 jumps through %q, want %s", j, h12.Name)
		}
		// The jump is real: ending h12's connections ends app3's, not
		// app1's.
		clients[1].Close()
		if n := h12.KillConnections(); n == 0 {
			t.Fatalf("%s holds no connection while app3 is connected through it", h12.Name)
		}
		select {
		case <-app3.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("app3's connection outlived its jump host's")
		}
		if _, err := clients[0].Run(ctx, "true", nil); err != nil {
			t.Errorf("app1 lost with h12: %v", err)
		}
	})
}
