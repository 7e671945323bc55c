//! moq-lite-04 and -03 sessions next to -05 through the relay (docs/moq-lite-versions.md): the
//! version is the connection's ALPN; a 04 or 03 client has no SETUP (it is scoped at the root,
//! anonymously), no TRACK (it subscribes directly and is answered SUBSCRIBE_OK first) and frames
//! without timestamps. A 04 publisher's groups reach a 05 viewer and the other way round; 03 too.

mod common;

use std::time::Duration;

use common::*;
use moq_net::lite::Version;
use moq_net::lite::session::{self, Session};
use moq_net::model::Origin;
use moq_quic::{Connection, Endpoint};

const LIMIT: Duration = Duration::from_secs(20);

/// A session over raw QUIC speaking `version`, publishing `publish`'s broadcasts or mirroring
/// the relay's into `subscribe`.
async fn dial(
	relay: &Relay,
	endpoint: &Endpoint,
	version: Version,
	origin: &Origin,
	publish: bool,
) -> (Connection, Session<Connection>) {
	let conn = within(
		LIMIT,
		"the handshake",
		quic_to(endpoint, relay.bound.quic, &relay.verification(), version.alpn()),
	)
	.await;
	assert_eq!(conn.alpn().as_deref(), Some(version.alpn()));
	let config = session::Config {
		origin: origin.id(),
		path: Some("/".into()),
		version,
		..session::Config::default()
	};
	let peer = within(LIMIT, "SETUP", session::setup(&conn, &config)).await.unwrap();
	let (publish, subscribe) = match publish {
		true => (Some(origin.consumer()), None),
		false => (None, Some(origin.producer())),
	};
	let session = session::start(conn.clone(), config, peer, publish, subscribe);
	(conn, session)
}

/// `from` publishes "cam" through the relay, `to` watches it: five groups arrive in order.
fn across(from: Version, to: Version) {
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let publisher_origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "cam");
		let _publisher = dial(&relay, &endpoint, from, &publisher_origin, true).await;
		let viewer_origin = Origin::new(2);
		let _viewer = dial(&relay, &endpoint, to, &viewer_origin, false).await;
		let mut cursor = within(LIMIT, "the announcement", announced(&viewer_origin, "cam"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		within(LIMIT, "the publisher's track in use", track.used()).await;
		for seq in 0..5 {
			publish(&track, seq);
		}
		let got = within(LIMIT, &format!("{from} -> {to}"), take(&mut cursor, 5)).await;
		assert_eq!(got, (0..5).map(|s| (s, s)).collect::<Vec<_>>(), "{from} -> {to}");
	});
}

#[test]
fn a_lite_04_publisher_reaches_a_lite_05_viewer() {
	across(Version::Lite04, Version::Lite05);
}

#[test]
fn a_lite_05_publisher_reaches_a_lite_04_viewer() {
	across(Version::Lite05, Version::Lite04);
}

#[test]
fn lite_03_both_ways() {
	across(Version::Lite03, Version::Lite05);
	across(Version::Lite05, Version::Lite03);
}

#[test]
fn lite_04_to_lite_04() {
	across(Version::Lite04, Version::Lite04);
}
