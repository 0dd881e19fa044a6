package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock's TCP rules see only plain TCP: a socket opened with
// IPPROTO_MPTCP binds and connects past them (checked on this package's
// ABI 7 kernel; Go's net.Listen asks for Multipath TCP by default since Go
// 1.24). So wherever a policy restricts TCP, the helper also installs a
// seccomp filter that fails socket(2) with IPPROTO_MPTCP as a kernel
// without Multipath TCP would, with EPROTONOSUPPORT; programs, Go's net
// package among them, then fall back to plain TCP, which Landlock governs.

// seccompArch is a system call ABI the running kernel may accept from a
// process of this GOARCH.
type seccompArch struct {
	audit      uint32   // AUDIT_ARCH_* as seccomp reports it
	socket     []uint32 // numbers of socket(2)
	socketcall []uint32 // multiplexers whose arguments a filter cannot read: failed with ENOSYS
}

// seccompArches lists, per GOARCH, the native ABI and the compatibility ones
// a tool could switch to by executing a binary built for them.
var seccompArches = map[string][]seccompArch{
	"amd64": {
		{audit: unix.AUDIT_ARCH_X86_64, socket: []uint32{41, 0x40000000 | 41}}, // x86-64 and x32
		{audit: unix.AUDIT_ARCH_I386, socket: []uint32{359}, socketcall: []uint32{102}},
	},
	"arm64": {
		{audit: unix.AUDIT_ARCH_AARCH64, socket: []uint32{198}},
		{audit: unix.AUDIT_ARCH_ARM, socket: []uint32{281}},
	},
}

// bpf is a tiny assembler for classic BPF with forward jumps to labels.
type bpf struct {
	prog   []unix.SockFilter
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at     int
	jt, jf string
}

func (b *bpf) label(name string) { b.labels[name] = len(b.prog) }

func (b *bpf) stmt(code uint16, k uint32) {
	b.prog = append(b.prog, unix.SockFilter{Code: code, K: k})
}

// jeq jumps to jt if A == k, else to jf ("" is the next instruction).
func (b *bpf) jeq(k uint32, jt, jf string) {
	b.fixups = append(b.fixups, fixup{len(b.prog), jt, jf})
	b.stmt(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, k)
}

func (b *bpf) assemble() ([]unix.SockFilter, error) {
	for _, f := range b.fixups {
		for _, j := range []struct {
			label string
			dst   *uint8
		}{{f.jt, &b.prog[f.at].Jt}, {f.jf, &b.prog[f.at].Jf}} {
			if j.label == "" {
				continue
			}
			to, ok := b.labels[j.label]
			off := to - f.at - 1
			if !ok || off < 0 || off > 255 {
				return nil, fmt.Errorf("bpf: bad jump to %q", j.label)
			}
			*j.dst = uint8(off)
		}
	}
	return b.prog, nil
}

// mptcpFilter builds the filter for arches.
func mptcpFilter(arches []seccompArch) ([]unix.SockFilter, error) {
	const (
		ld       = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ret      = unix.BPF_RET | unix.BPF_K
		offNr    = 0  // seccomp_data.nr
		offArch  = 4  // seccomp_data.arch
		offProto = 32 // low word of seccomp_data.args[2], little-endian
	)
	b := &bpf{labels: map[string]int{}}
	b.stmt(ld, offArch)
	for i := range arches {
		b.jeq(arches[i].audit, fmt.Sprint("arch", i), "")
	}
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	for i, a := range arches {
		b.label(fmt.Sprint("arch", i))
		b.stmt(ld, offNr)
		for _, nr := range a.socket {
			b.jeq(nr, "proto", "")
		}
		for _, nr := range a.socketcall {
			b.jeq(nr, "enosys", "")
		}
		b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	}
	b.label("proto")
	b.stmt(ld, offProto)
	b.jeq(unix.IPPROTO_MPTCP, "eprotonosupport", "")
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	b.label("eprotonosupport")
	b.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPROTONOSUPPORT))
	b.label("enosys")
	b.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	return b.assemble()
}

// denyMPTCP installs the filter on the calling thread, which must have
// no_new_privs set and must be the one that execs the tool.
func denyMPTCP() error {
	arches, ok := seccompArches[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("sandbox: cannot keep Multipath TCP from bypassing the TCP rules on %s", runtime.GOARCH)
	}
	prog, err := mptcpFilter(arches)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("sandbox: seccomp filter against Multipath TCP: %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}
