// Package inventory says which hosts a fleet command means: the words a
// user typed (names, ssh config Host patterns such as web*, files of
// names as @hosts.txt, Ansible groups as @group) become hosts, each with
// what its inventory says about reaching it as a tunnel.Override.
//
// It exists because the people a fleet is for already keep their hosts
// somewhere: in ~/.ssh/config, in a file for pssh -h, or in an Ansible
// inventory, often a dynamic one that asks a cloud API. Where
// ansible-inventory is installed it is asked (--list), so that inventory
// plugins, scripts, group_vars/ and host_vars/ work as they do for
// Ansible; otherwise static INI and YAML inventories are read here, with
// Ansible's rules for groups, children, ranges and the precedence of
// vars, and Resolve says which way was used.
//
// Of a host's vars, the connection ones are used: ansible_host,
// ansible_user, ansible_port, ansible_ssh_private_key_file, and a jump
// host in ansible_ssh_common_args (or _extra_args) as -J or ProxyJump.
// A Jinja template, a ProxyCommand or a connection other than ssh is an
// error naming the host, never a guess.
//
// What it trusts: the user's own files and programs (the inventory, the
// ssh config, ansible-inventory). What they print is still bounded, and
// the names and values taken from them are checked to be plain words, so
// that no option reaches ssh disguised as a host.
package inventory
