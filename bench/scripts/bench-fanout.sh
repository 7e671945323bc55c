#!/usr/bin/env bash
# Prints one table of a fan-out harness's figures: the current tree, then each revision given.
#
#   bench/scripts/bench-fanout.sh [REV...]          (or: just bench-fanout [REV...])
#   HARNESS=model SUBSCRIBERS=1,64,512 RUNS=3 bench/scripts/bench-fanout.sh HEAD~1
#
# Each revision is built in a git worktree beside the tree (../<tree>-bench-<sha>), which keeps
# its own target directory, so a second run at the same revision reuses its build cache. A
# revision that has no harness (or fails to build) shows n/a.
set -euo pipefail

top=$(git rev-parse --show-toplevel)
harness=${HARNESS:-model}
subscribers=${SUBSCRIBERS:-1,64,512}
runs=${RUNS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run_at() { # dir label file
	if (cd "$1" && CARGO_TARGET_DIR="$1/target" cargo build --release --quiet -p bench --bin fanout) >&2; then
		"$1/target/release/fanout" "$harness" --subscribers "$subscribers" --runs "$runs" --json "$3" >&2 || true
	else
		echo "bench-fanout: $2 does not build the harness" >&2
	fi
}

cd "$top"
columns=()
run_at "$top" current "$out/current.json"
dirty=$(git diff --quiet HEAD -- . && echo "" || echo "+dirty")
columns+=(--label "current ($(git rev-parse --short HEAD)$dirty)" "$out/current.json")
for rev in "$@"; do
	sha=$(git rev-parse --short "$rev^{commit}")
	tree="$(dirname "$top")/$(basename "$top")-bench-$sha"
	if [ ! -d "$tree" ]; then
		git worktree add --detach --quiet "$tree" "$sha"
	else
		# A worktree left at another commit (by hand) must not pass for this one.
		git -C "$tree" checkout --detach --quiet "$sha"
	fi
	run_at "$tree" "$rev" "$out/$sha.json"
	columns+=(--label "$rev ($sha)" "$out/$sha.json")
done
"$top/target/release/fanout" compare "${columns[@]}"
