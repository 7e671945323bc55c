# Recipes for the workspace. `cargo install just` if you do not have it; each recipe is one
# plain command you can also paste.

default: check test

# Formatting and lints, as CI runs them.
check:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

# The test suite, with nextest's hang timeout (.config/nextest.toml).
test:
	cargo nextest run --workspace

# Browsers end to end: headless Chromium (Debian's `chromium`) with the public @moq/net client
# through the relay, and the relay's own page; needs Node/npm (`npm ci` runs on first use).
browser:
	cargo nextest run -p moq-relay --test browser --run-ignored ignored-only

# Rebuild the relay's page (moq-relay/web/src -> web/dist/app.js, embedded in the binary).
page:
	cd moq-relay/web && npm ci --no-audit --no-fund && node build.mjs

# Loom models of kio's cross-thread handoffs (own target dir: loom changes every crate's cfg).
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p kio --release --test loom

# kio's benchmarks: instruction counts under callgrind where there is no PMU.
bench-kio:
	cargo run --release -p bench --bin kio -- --save

# UDP over loopback, kio against blocking std::net: datagrams per CPU-second, io_uring_enter per datagram.
bench-udp:
	cargo run --release -p bench --bin udp -- --save

# Fan-out harness, current tree and each revision side by side: `just bench-fanout HEAD~1`.
bench-fanout *REVS:
	bench/scripts/bench-fanout.sh {{REVS}}

# The send scheduler: instructions per reprioritize and retire, 16 to 16,384 groups (callgrind).
bench-scheduler:
	cargo run --release -p bench --bin scheduler -- --save

# QUIC throughput over loopback: MB/s, CPU-seconds per GB, io_uring_enter per packet, GSO/GRO on and off.
bench-quic:
	cargo run --release -p bench --bin quic

# The relay under load (fanout 100 and 400, chat 20; CPU, memory, latency per delivered frame),
# this tree's relay and each revision's side by side: `just bench-relay HEAD~1`. More flags:
# `cargo run --release -p bench --bin relay -- --help`.
bench-relay *REVS:
	cargo run --release -p bench --bin relay -- --save $(for rev in {{REVS}}; do printf -- '--rev %s ' "$rev"; done)

# The same under callgrind: user-space instructions per delivered frame, and the top functions.
bench-relay-callgrind *REVS:
	cargo run --release -p bench --bin relay -- --callgrind --save $(for rev in {{REVS}}; do printf -- '--rev %s ' "$rev"; done)

# quinn-proto alone on the relay benchmark's fan-out, the relay side counted (callgrind): what
# any relay on it pays per delivered frame, beside the whole relay's count. bench/results/quic-floor.md.
bench-quic-floor:
	cargo run --release -p bench --bin quic-floor -- --save

# kio against compio, monoio and glommio, the same work side by side: bench/results/peers.md.
bench-peers:
	cargo run --release --manifest-path bench/peers/Cargo.toml -- --syscalls --callgrind --save

# A relay cluster's control plane (2-16 relays, 1,000 broadcasts, simulated network): bench/results/cluster.md.
bench-cluster:
	cargo run --release -p bench --bin cluster -- --save

# What a hostile peer can make the relay hold: moq-relay/tests/memory.rs's measurements, medians of
# five runs, written to bench/results/relay-memory.md.
bench-memory:
	cargo run -p bench --bin relay-memory

# The relay with its defaults: QUIC and HTTP on [::]:4443, a generated certificate, anonymous access.
relay:
	cargo run --release -p moq-relay

# The model fan-out table, saved to bench/results/ (perf counter, else callgrind, else task-clock).
bench-model:
	cargo run --release -p bench --bin fanout -- model --save

# Fuzz what peers send (cargo-fuzz; `cargo install cargo-fuzz`): moq-net's wire decoders,
# moq-quic's HTTP/3 codec and WebTransport server, moq-relay's token check, each crate's targets
# in its `fuzz/` workspace. `just fuzz group 300` runs one target for 300 s, `just fuzz` every
# target for 10 s.
# Findings land in that workspace's artifacts/; see moq-net/fuzz/README.md.
# A target name that matches none, or cargo-fuzz missing, is an error, not a run of nothing.
fuzz TARGET="all" SECONDS="10":
	#!/usr/bin/env bash
	set -euo pipefail
	ran=0
	for dir in moq-net/fuzz moq-quic/fuzz moq-relay/fuzz; do
		targets=$(cd "$dir" && cargo fuzz list)
		for target in $targets; do
			if [ "{{TARGET}}" = all ] || [ "{{TARGET}}" = "$target" ]; then
				(cd "$dir" && RUSTC_BOOTSTRAP=1 cargo fuzz run --debug-assertions "$target" -- -max_total_time={{SECONDS}})
				ran=$((ran + 1))
			fi
		done
	done
	if [ "$ran" = 0 ]; then
		echo "no fuzz target named {{TARGET}}" >&2
		exit 1
	fi
