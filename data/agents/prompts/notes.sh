#!/bin/sh
# Prints the notes an agent should follow besides its profile: the user's own
# (~/.config/ollie/AGENTS.md) and the project's (AGENTS.md, else CLAUDE.md, at
# the top of the git repository and in the working directory). Each file is
# cut at 16 KiB. Nothing found prints nothing; the script always exits 0.

cwd=${OLLIE_CWD:-$PWD}
limit=16384

show() { # title file
	echo "## $1 ($2)"
	echo
	head -c "$limit" "$2"
	echo
	[ "$(wc -c <"$2")" -gt "$limit" ] && echo "[cut at $limit bytes: read the file for the rest]"
	echo
}

notes() { # directory: the first of AGENTS.md and CLAUDE.md in it
	for f in "$1/AGENTS.md" "$1/CLAUDE.md"; do
		if [ -f "$f" ] && [ -r "$f" ]; then
			echo "$f"
			return
		fi
	done
}

user="${XDG_CONFIG_HOME:-$HOME/.config}/ollie/AGENTS.md"
[ -f "$user" ] && [ -r "$user" ] && show "Notes from the user" "$user"

top=$(git -C "$cwd" rev-parse --show-toplevel 2>/dev/null)
shown=
for dir in "$top" "$cwd"; do
	[ -n "$dir" ] || continue
	f=$(notes "$dir")
	[ -n "$f" ] || continue
	[ -n "$shown" ] && [ "$f" -ef "$shown" ] && continue
	show "Project notes" "$f"
	shown=$f
done
exit 0
