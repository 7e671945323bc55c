//! The load generator's accounting against a live relay (in-process, over loopback QUIC): known
//! drops and delays injected by its publishers come out of the report exactly.

use std::sync::{Arc, mpsc};
use std::time::Duration;

use bench::load::{self, Injection, Live, Plan, Shape, Target};
use moq_client::Url;
use moq_quic::Verification;
use moq_relay::config::Config;
use moq_relay::server;

/// A relay on 127.0.0.1 with one worker, anonymous access; shut down on drop.
struct Relay(server::Running);

impl Relay {
	fn start() -> Self {
		let config = Config {
			http: None,
			..Config::loopback()
		};
		Self(server::spawn(config).expect("the relay started"))
	}

	fn target(&self) -> Target {
		let port = self.0.bound.quic.port();
		Target {
			addr: format!("127.0.0.1:{port}").parse().unwrap(),
			publish_addr: None,
			url: Url::parse(&format!("moqt://localhost:{port}/load")).unwrap(),
			verification: Verification::Disabled,
		}
	}
}

fn plan(shape: &str) -> Plan {
	let mut plan = Plan::new(Shape::parse(shape).unwrap(), 50, 300);
	plan.steady = Duration::from_secs(2);
	plan.settle = Duration::from_millis(200);
	plan.drain = Duration::from_millis(800);
	plan.ramp_timeout = Duration::from_secs(20);
	plan
}

#[test]
fn injected_drops_are_the_loss_and_injected_delays_the_tail() {
	let relay = Relay::start();
	let delay = Duration::from_millis(150);
	let mut plan = plan("fanout:1x3");
	// At 50 fps (a group every 20 ms): every 10th group never written, every 25th held back 150 ms
	// (and the 7 due meanwhile written late behind it, 130 ms down to 10 ms late).
	plan.inject = Injection {
		drop_every: 10,
		delay_every: 25,
		delay,
	};
	let report = load::run(&plan, &relay.target(), Arc::new(Live::default()), None).unwrap();
	eprintln!("{}", report.summary());
	assert_eq!(report.subscriptions, 3);
	// About 100 groups published in the 2 s window, 10 of them dropped, for each of 3 subscriptions.
	assert!(
		report.expected >= 3 * 90 && report.expected.is_multiple_of(3),
		"{report:?}"
	);
	assert!(
		report.injected_drops >= 3 * 9 && report.injected_drops.is_multiple_of(3),
		"{report:?}"
	);
	assert_eq!(
		report.lost(),
		report.injected_drops,
		"the loss is exactly the dropped groups: {report:?}"
	);
	assert_eq!(report.delivered, report.present, "one frame per group: {report:?}");
	// 4% of the groups wait at least the delay: the 99th percentile does, the median does not.
	let delay_us = delay.as_micros() as u64;
	assert!(report.latency_p99_us >= delay_us, "{report:?}");
	assert!(report.latency_max_us >= report.latency_p99_us);
	assert!(report.latency_p50_us < delay_us, "{report:?}");
	assert_eq!((report.reconnects, report.failures), (0, 0), "{report:?}");
}

#[test]
fn a_chat_without_injection_loses_nothing() {
	let relay = Relay::start();
	let live = Arc::new(Live::default());
	let (events, heard) = mpsc::channel();
	let report = load::run(&plan("chat:4"), &relay.target(), live.clone(), Some(events)).unwrap();
	assert_eq!(
		heard.try_iter().collect::<Vec<_>>(),
		[load::Event::Ramped, load::Event::SteadyStart, load::Event::SteadyEnd]
	);
	// Four participants each watch the three others.
	assert_eq!((report.connections, report.subscriptions), (4, 12));
	assert!(report.expected >= 12 * 90, "{report:?}");
	assert_eq!((report.lost(), report.injected_drops), (0, 0), "{report:?}");
	assert_eq!(report.delivered, report.expected);
	// The live counter saw the window's frames and the ramp's.
	assert!(live.delivered.load(std::sync::atomic::Ordering::Relaxed) >= report.delivered);
}

#[test]
fn many_broadcasts_are_all_visible_past_the_default_announce_limit() {
	// 5,000 announced broadcasts over five publishers, more than a client session mirrors by
	// default (1,024): the generator's viewers raise their limit to what the shape announces, so
	// the watched ones are always among those they see.
	let relay = Relay::start();
	let mut plan = plan("many:5000/5x2");
	plan.steady = Duration::from_secs(1);
	let report = load::run(&plan, &relay.target(), Arc::new(Live::default()), None).unwrap();
	assert_eq!((report.connections, report.subscriptions), (5 + 10, 10));
	assert!(report.expected > 0);
	assert_eq!(report.lost(), 0, "{report:?}");
}
