// Package sandbox runs tools under Landlock.
//
// A [Profile] is a YAML file naming what a tool may read, write and execute,
// which TCP ports it may bind and connect to, and which environment
// variables it receives. The deployed data/sandbox/default.yaml is the
// profile every tool runs in unless told otherwise; a file of the same name
// in ~/.config/ollie/sandbox overrides it ([Profiles]). [Profile.Resolve]
// fills in the templates ({CWD}, {HOME}, {TMPDIR}, the XDG directories,
// {OLLIE_TOOLS_PATH}, {env:NAME}) and yields a concrete [Policy].
//
// Landlock restricts the process that enables it, so the policy is applied
// in a re-executed child of the running binary just before it execs the
// tool; above it, the helper stays the parent of the call, a subreaper that
// kills whatever the tool leaves behind when it exits. [Command] builds the
// helper, [IsHelper] and [HelperMain] are its side, and the binary's main
// calls them first thing. The policy travels over inherited pipes, never in
// argv or the environment. A profile's [Limits] bound each call's memory,
// processes and files. A [Pool] starts helpers before their calls, so that
// a call pays no process start: [Pool.Command] hands the call to one that
// waits, and the result guarantees what [Command]'s does.
// [Unsandboxed] is the approved bypass: no Landlock, the same environment
// allowlist and process-group settings.
//
// A kernel without Landlock, or with a Landlock ABI older than the profile
// needs (filesystem rules: ABI 3, TCP rules: ABI 4), refuses to run tools
// ([ErrNoLandlock], [ErrABITooOld]) unless the profile says best_effort:
// true; then what the kernel can enforce is enforced and
// [Policy.Enforcement] says loudly that tools run partially sandboxed or
// unsandboxed.
//
// # What Landlock does not restrict
//
// On kernels up to ABI 8 (this project's machines have ABI 7; ABI 9 and 10
// close some of these gaps and are used when present):
//
//   - Metadata: stat, readlink, chdir, chmod, chown, utime, setxattr,
//     flock, fcntl, access. A tool can learn that any file exists and, where
//     ordinary permissions let it, change its mode and owner.
//   - File descriptors opened before the sandbox: stdin, stdout, stderr and
//     any file the caller passes in ExtraFiles stay fully usable.
//   - Networking other than TCP bind and connect: UDP (until ABI 10; this
//     package handles TCP only, so a profile means the same on every kernel),
//     raw and packet sockets (root only), SCTP. TCP rules name ports, never
//     addresses: connect: [443] reaches every host on 443. Multipath TCP
//     also passes Landlock's TCP rules; the helper closes that gap with a
//     seccomp filter (see mptcp_linux.go).
//   - Connecting to pathname Unix sockets before ABI 9: a tool can talk to any
//     socket it can name and ordinary permissions allow (D-Bus, an SSH agent,
//     /var/run/docker.sock). Abstract Unix sockets and signals to processes
//     outside the sandbox are scoped from ABI 6 and are denied here.
//   - ioctl on device files before ABI 5, and on descriptors that were open
//     before the sandbox at any ABI.
//   - System V IPC and POSIX message queues, CPU time (the dispatcher's
//     timeout bounds it), memory, processes and files beyond [Limits], and
//     the user's identity: a tool run by root keeps root's capabilities
//     other than those Landlock itself denies (mount, ptrace of outside
//     processes).
//
// The package trusts the profile files it is given and the binary it
// re-executes; it trusts nothing the tool does.
package sandbox

import "errors"

var (
	// ErrUnknownProfile: no profile of that name in any profile directory.
	ErrUnknownProfile = errors.New("unknown sandbox profile")
	// ErrUnknownField: a profile names a field this package does not know.
	ErrUnknownField = errors.New("unknown field")
	// ErrUnknownTemplate: a profile path uses a template this package does not know.
	ErrUnknownTemplate = errors.New("unknown template")
	// ErrNoLandlock: the kernel has no Landlock and the profile is not best effort.
	ErrNoLandlock = errors.New("kernel lacks Landlock")
	// ErrABITooOld: the kernel's Landlock ABI cannot enforce what the profile
	// asks and the profile is not best effort.
	ErrABITooOld = errors.New("kernel's Landlock ABI is too old for the profile")
)
