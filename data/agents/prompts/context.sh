#!/bin/sh
# Prints the "Environment" section of a system prompt: the host, the user,
# the working directory and, in a git repository, its state. Profiles run it
# as a prompt command (sh "$OLLIE/agents/prompts/context.sh"). Every probe is
# optional, a missing program only leaves its line out, and the script exits
# 0: facts about the host must not keep an agent from starting.

cwd=${OLLIE_CWD:-$PWD}

echo "## Environment"
echo
echo "- Date: $(date '+%Y-%m-%d %H:%M %Z')"
echo "- System: $(uname -a)"
if [ -r /etc/os-release ]; then
	os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-$NAME}")
	[ -n "$os" ] && echo "- Distribution: $os"
fi
user=$(id -un 2>/dev/null || echo "${USER:-unknown}")
if [ "$(id -u 2>/dev/null)" = 0 ]; then
	echo "- User: $user (root: file permissions will not stop a mistake; take extra care)"
else
	echo "- User: $user"
fi
echo "- Working directory: $cwd"
echo "- ollie: session ${OLLIE_SESSION:-?}, agent ${OLLIE_AGENT:-?}, profile ${OLLIE_PROFILE:-?}"

if command -v git >/dev/null 2>&1 && top=$(git -C "$cwd" rev-parse --show-toplevel 2>/dev/null); then
	# --no-optional-locks: looking must not take the index lock from the user.
	# The first line is "## branch...upstream [ahead n]" or "## No commits yet on branch".
	status=$(git --no-optional-locks -C "$cwd" status --porcelain --branch 2>/dev/null)
	branch=$(printf '%s\n' "$status" | sed -n '1s/^## //p')
	status=$(printf '%s\n' "$status" | sed 1d)
	echo "- Git repository: $top"
	echo "- Branch: $branch"
	last=$(git -C "$cwd" log -1 --format='%h %s (%cr)' 2>/dev/null) && echo "- Last commit: $last"
	if [ -z "$status" ]; then
		echo "- Working tree: clean"
	else
		n=$(printf '%s\n' "$status" | wc -l | tr -d ' ')
		echo "- Working tree: $n changed or untracked paths (git status --porcelain):"
		echo
		echo '```'
		printf '%s\n' "$status" | head -n 20
		[ "$n" -gt 20 ] && echo "… and $((n - 20)) more"
		echo '```'
	fi
fi
exit 0
