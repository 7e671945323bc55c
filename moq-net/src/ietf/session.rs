//! An IETF session (drafts 14 to 16: [`Version`]) over a [`Transport`], serving and
//! filling the same model as moq-lite's.
//!
//! # Flow
//!
//! 1. Setup: the client opens the control stream (the first bidirectional stream) and sends
//!    CLIENT_SETUP (draft-14: with the versions it speaks; the server answers SERVER_SETUP with
//!    draft-14, or closes with VERSION_NEGOTIATION_FAILED; draft-15: the ALPN chose). Each side
//!    grants the other request ids with MAX_REQUEST_ID. A client's PATH parameter (and its
//!    AUTHORIZATION_TOKEN, [`PeerSetup::token`], for the relay's auth) plays the part
//!    of moq-lite's SETUP path (raw QUIC; over WebTransport the CONNECT carries it).
//! 2. The **publisher half** (given an [`OriginConsumer`]) answers SUBSCRIBE_NAMESPACE with OK,
//!    then a PUBLISH_NAMESPACE for each broadcast under the prefix and PUBLISH_NAMESPACE_DONE as
//!    each goes; SUBSCRIBE with SUBSCRIBE_OK (the track alias is the request id) and the track's
//!    groups from the latest one, one subgroup stream each (subgroup 0, every object of the
//!    group, consecutive object ids, the FIN ending the group), newer groups first; UNSUBSCRIBE
//!    and the track's end with PUBLISH_DONE.
//! 3. The **subscriber half** (given an [`OriginProducer`]) asks the peer for its namespaces
//!    (SUBSCRIBE_NAMESPACE of the root) and takes every PUBLISH_NAMESPACE, asked or not, into the
//!    origin as a broadcast whose tracks are fetched on first demand: SUBSCRIBE (largest object),
//!    its subgroup streams ingested into the track's cache, UNSUBSCRIBE when nobody wants it.
//!
//! 4. FETCH and TRACK_STATUS are answered from the track's cache (a FETCH never waits for
//!    objects, and holds one group at a time); PUBLISH is refused (NOT_SUPPORTED), and so is
//!    SUBSCRIBE_UPDATE from draft-15 on (draft-14 has no answer: it is read and ignored);
//!    object datagrams are not read.
//!
//! draft-16 moves SUBSCRIBE_NAMESPACE to a stream of its own, answered there with NAMESPACE and
//! NAMESPACE_DONE (`namespace_stream`, and `ask_for_namespaces` on the subscriber side).
//!
//! # Bad input
//!
//! Bytes that do not decode, a request id out of turn or past our grant, a second SETUP, or a
//! subgroup stream of a type the draft does not have close the session with the draft's code
//! ([`super::code`]). The origin and other sessions are untouched.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use kio::JoinHandle;
use kio::sync::Queue;

use super::data::{FETCH_HEADER, FetchObject, ObjectHeader, SubgroupHeader, SubgroupId, status};
use super::message::{
	FetchKind, Filter, Location, Message, Namespace, Parameters, RequestError, Subscribe, SubscribeOk,
	subscribe_options,
};
use super::{DRAFT_14, Version, code, done_code, request_code, stream_code};
use crate::coding::{DecodeError, Encode, encode_varint};
use crate::lite::session::TRACK_IDLE_LINGER;
use crate::lite::session::{Budget as SessionBudget, Config, Reader, Sending, SessionError};
use crate::model::{
	self, BroadcastProducer, Frame, OriginConsumer, OriginProducer, Path, Publication, Route, Subscription, Timestamp,
	TrackConsumer, TrackInfo, TrackProducer,
};
use crate::transport::{RecvStream, SendStream, Transport, TransportError, TransportExt};

/// SETUP parameter PATH.
const PATH: u64 = 0x01;
/// SETUP parameter MAX_REQUEST_ID.
const MAX_REQUEST_ID: u64 = 0x02;
/// SETUP parameter AUTHORIZATION_TOKEN.
const AUTHORIZATION_TOKEN: u64 = 0x03;
/// A token's alias type USE_VALUE: the token itself follows (its type, then its value), not an
/// alias of one. We keep no aliases (MAX_AUTH_TOKEN_CACHE_SIZE is 0: none may be registered).
const USE_VALUE: u64 = 0x3;
/// SETUP parameter MOQT_IMPLEMENTATION (0x07 as the public implementations send it; draft-14's
/// text gives it 0x05, which is AUTHORITY's).
const IMPLEMENTATION: u64 = 0x07;

/// The longest object we take (a group's byte cap, as moq-lite's frames).
const MAX_OBJECT: u64 = model::group::MAX_GROUP_BYTES as u64;

/// Control messages queued for the peer before their senders wait.
const CONTROL_QUEUE: usize = 256;

/// Which side of the connection this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
	/// Opened the connection: opens the control stream, sends CLIENT_SETUP, even request ids.
	Client,
	/// Accepted it: answers SERVER_SETUP, odd request ids.
	Server,
}

/// What the peer said in its SETUP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerSetup {
	/// The client's PATH (with its query), if it sent one.
	pub path: Option<String>,
	/// Request ids below this we may use.
	pub max_request_id: u64,
	/// The peer's implementation, if it named it.
	pub implementation: Option<String>,
	/// The value of the client's AUTHORIZATION_TOKEN (USE_VALUE, any token type), if it sent one
	/// in UTF-8.
	pub token: Option<String>,
}

/// Why a session (or its setup) ended badly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
	/// The transport failed or closed.
	Transport(TransportError),
	/// The peer broke the protocol: the session closes with this code ([`super::code`]).
	Protocol(u64, &'static str),
	/// A budget refused what one stream needs: that stream stops, the session goes on.
	Refused(&'static str),
}

impl std::fmt::Display for Error {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		match self {
			Self::Transport(err) => write!(f, "transport: {err}"),
			Self::Protocol(code, why) => write!(f, "protocol error {code:#x}: {why}"),
			Self::Refused(why) => write!(f, "refused: {why}"),
		}
	}
}

impl std::error::Error for Error {}

impl From<TransportError> for Error {
	fn from(err: TransportError) -> Self {
		Self::Transport(err)
	}
}

fn violation(why: &'static str) -> Error {
	Error::Protocol(code::PROTOCOL_VIOLATION, why)
}

/// What a stream reader's failure is to the session: bytes that do not decode (or a stream that
/// ends inside a value) break the protocol; a spent budget refuses the stream.
impl From<SessionError> for Error {
	fn from(err: SessionError) -> Self {
		match err {
			SessionError::Transport(err) => Self::Transport(err),
			SessionError::Refused(_) => Self::Refused("the session's partial-bytes budget is spent"),
			SessionError::Decode(_) | SessionError::Encode(_) | SessionError::Protocol(_) | SessionError::Model(_) => {
				violation("bytes that do not decode")
			}
		}
	}
}

/// The next control message of `version` from `reader`; `None` at a clean end.
async fn read_message<R: RecvStream>(reader: &mut Reader<R>, version: Version) -> Result<Option<Message>, Error> {
	Ok(reader.decode_with(|buf| Message::decode_for(buf, version)).await?)
}

/// The control stream, set up.
pub struct Control<T: Transport> {
	send: T::SendHalf,
	reader: Reader<T::RecvHalf>,
	side: Side,
	version: Version,
	/// The request ids granted the peer in SETUP.
	granted: u64,
}

/// Accepts the client's control stream and answers its CLIENT_SETUP (a server) in `version`
/// (the ALPN's; draft-14's CLIENT_SETUP must offer it), granting `max_request_id` request ids.
pub async fn accept<T: Transport>(
	transport: &T,
	max_request_id: u64,
	version: Version,
) -> Result<(Control<T>, PeerSetup), Error> {
	let (mut send, recv) = transport.accept_bi().await?;
	let mut reader = Reader::new(recv);
	let first = read_message(&mut reader, version).await?;
	let Some(Message::ClientSetup { versions, params }) = first else {
		return Err(violation("the control stream did not start with CLIENT_SETUP"));
	};
	if version == Version::Draft14 && !versions.contains(&DRAFT_14) {
		return Err(Error::Protocol(
			code::VERSION_NEGOTIATION_FAILED,
			"no version in common",
		));
	}
	let answer = Message::ServerSetup {
		version: version.number(),
		params: Parameters::default()
			.with_int(MAX_REQUEST_ID, max_request_id)
			.with_bytes(IMPLEMENTATION, &b"moq-relay"[..]),
	};
	write(&mut send, &answer, version).await?;
	let peer = peer_setup(&params);
	Ok((
		Control {
			send,
			reader,
			side: Side::Server,
			version,
			granted: max_request_id,
		},
		peer,
	))
}

/// Opens the control stream and sends CLIENT_SETUP (a client) in `version` with `path`, granting
/// the server `max_request_id` request ids; the server's answer.
pub async fn connect<T: Transport>(
	transport: &T,
	path: Option<&str>,
	max_request_id: u64,
	version: Version,
) -> Result<(Control<T>, PeerSetup), Error> {
	let (mut send, recv) = transport.open_bi().await?;
	let mut params = Parameters::default().with_int(MAX_REQUEST_ID, max_request_id);
	if let Some(path) = path {
		params = params.with_bytes(PATH, Bytes::copy_from_slice(path.as_bytes()));
	}
	let versions = match version {
		Version::Draft14 => vec![DRAFT_14],
		Version::Draft15 | Version::Draft16 => Vec::new(),
	};
	write(&mut send, &Message::ClientSetup { versions, params }, version).await?;
	let mut reader = Reader::new(recv);
	match read_message(&mut reader, version).await? {
		Some(Message::ServerSetup {
			version: chosen,
			params,
		}) if chosen == version.number() => Ok((
			Control {
				send,
				reader,
				side: Side::Client,
				version,
				granted: max_request_id,
			},
			peer_setup(&params),
		)),
		Some(Message::ServerSetup { .. }) => Err(Error::Protocol(
			code::VERSION_NEGOTIATION_FAILED,
			"the server chose a version we did not offer",
		)),
		_ => Err(violation("the control stream did not start with SERVER_SETUP")),
	}
}

fn peer_setup(params: &Parameters) -> PeerSetup {
	PeerSetup {
		path: params.bytes(PATH).map(|p| String::from_utf8_lossy(p).into_owned()),
		// Absent means none may be used (the draft's default); the public clients send one.
		max_request_id: params.int(MAX_REQUEST_ID).unwrap_or(0),
		implementation: params
			.bytes(IMPLEMENTATION)
			.map(|p| String::from_utf8_lossy(p).into_owned()),
		token: params.bytes(AUTHORIZATION_TOKEN).and_then(|token| token_value(token)),
	}
}

/// A USE_VALUE token's value: `Alias Type (0x3), Token Type, Token Value` (the value runs to the
/// end); `None` for any other form.
fn token_value(mut token: &[u8]) -> Option<String> {
	if crate::coding::decode_varint(&mut token).ok()? != USE_VALUE {
		return None;
	}
	crate::coding::decode_varint(&mut token).ok()?;
	String::from_utf8(token.to_vec()).ok()
}

async fn write<S: SendStream>(send: &mut S, message: &Message, version: Version) -> Result<(), Error> {
	let mut out = Vec::new();
	message
		.encode_for(version, &mut out)
		.map_err(|_| violation("a message we cannot encode"))?;
	let mut bytes = Bytes::from(out);
	kio::wait(|w| send.poll_write(w, &mut bytes)).await?;
	Ok(())
}

/// A reply to one of our requests.
enum Reply {
	Subscribed(SubscribeOk),
	Refused(RequestError),
}

/// A track we subscribed to: where its objects go.
struct Upstream {
	track: TrackProducer,
	request_id: u64,
}

/// A broadcast the peer published into our origin.
struct Mirrored {
	/// The PUBLISH_NAMESPACE that brought it; none for a draft-16 NAMESPACE.
	request_id: Option<u64>,
	broadcast: BroadcastProducer,
	_publication: Publication,
	_tracks: Task,
}

/// A subscription of the peer's being served: what a joining FETCH of it needs.
struct Serving {
	_task: Task,
	namespace: Namespace,
	name: String,
	/// The first group it sends (whole): a joining FETCH ends before it.
	start: u64,
}

/// A task aborted when dropped.
struct Task(JoinHandle<()>);

impl Drop for Task {
	fn drop(&mut self) {
		self.0.abort();
	}
}

struct Inner<T: Transport> {
	transport: T,
	config: Config,
	side: Side,
	version: Version,
	out: Queue<Message>,
	/// Our next request id, and the peer's grant.
	next_request_id: Cell<u64>,
	peer_max: Cell<u64>,
	/// The peer's next request id, and our grant.
	expected: Cell<u64>,
	granted: Cell<u64>,
	/// The peer's SUBSCRIBEs, by request id.
	subscriptions: RefCell<HashMap<u64, Serving>>,
	/// The peer's FETCHes being sent, by request id.
	fetches: RefCell<HashMap<u64, Task>>,
	/// The peer's SUBSCRIBE_NAMESPACEs, by prefix, with their request ids.
	announcers: RefCell<HashMap<Namespace, (u64, Task)>>,
	/// The namespaces we announced to the peer (PUBLISH_NAMESPACE), with how many prefixes of
	/// its announced each; a PUBLISH_NAMESPACE_CANCEL takes one out, and no PUBLISH_NAMESPACE_DONE
	/// follows for it.
	announced: RefCell<HashMap<Namespace, usize>>,
	/// Our SUBSCRIBEs waiting for their reply: the track their objects go to.
	pending: RefCell<HashMap<u64, (TrackProducer, Queue<Reply>)>>,
	/// Counts the aliases the peer gave: a subgroup stream that beat its SUBSCRIBE_OK (another
	/// stream) waits for it.
	aliases: kio::sync::Producer<u64>,
	/// Our subscriptions, by the alias the peer gave them.
	upstream: RefCell<HashMap<u64, Upstream>>,
	/// The peer's namespaces in our origin.
	mirrored: RefCell<HashMap<Namespace, Mirrored>>,
	/// draft-16: the namespaces of `mirrored` by the request id of their PUBLISH_NAMESPACE
	/// (PUBLISH_NAMESPACE_DONE names that).
	mirrored_ids: RefCell<HashMap<u64, Namespace>>,
	/// draft-16: the peer's SUBSCRIBE_NAMESPACE streams open now.
	namespace_streams: Cell<usize>,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
	closed: Cell<Option<u64>>,
	/// What the peer makes the session hold: bytes of messages and objects received in part,
	/// over all its streams (`Limits::partial_bytes`, a child of the relay's gauge and charged to
	/// the connection's memory), as a moq-lite session's.
	budget: Rc<SessionBudget>,
	/// Subscriptions the peer ended (PUBLISH_DONE), kept a moment for their late streams.
	closing: RefCell<Vec<Task>>,
	/// The peer's grant of request ids, counted as it grows (what waits for one watches it).
	grants: kio::sync::Producer<u64>,
}

impl<T: Transport + 'static> Inner<T> {
	fn fail(&self, err: &Error) {
		let code = match err {
			Error::Protocol(code, _) => *code,
			Error::Transport(_) | Error::Refused(_) => code::INTERNAL_ERROR,
		};
		tracing::debug!(%err, "ietf session failed");
		self.close(code);
	}

	fn close(&self, code: u64) {
		if self.closed.get().is_none() {
			self.closed.set(Some(code));
			self.transport.close(code, "");
		}
	}

	async fn send(&self, message: Message) {
		// Closed only with the session.
		let _ = self.out.push(message).await;
	}

	/// Checks a request id of the peer's: in turn, and within our grant; grants more as the
	/// peer uses them.
	fn take_request_id(&self, id: u64) -> Result<(), Error> {
		if id != self.expected.get() {
			return Err(Error::Protocol(code::INVALID_REQUEST_ID, "a request id out of turn"));
		}
		if id >= self.granted.get() {
			return Err(Error::Protocol(code::TOO_MANY_REQUESTS, "a request id past our grant"));
		}
		self.expected.set(id + 2);
		Ok(())
	}

	/// The peer's requests that hold something here: its subscriptions, namespace subscriptions
	/// and published namespaces.
	fn live_requests(&self) -> usize {
		self.subscriptions.borrow().len()
			+ self.fetches.borrow().len()
			+ self.announcers.borrow().len()
			+ self.namespace_streams.get()
			+ self.mirrored.borrow().len()
	}

	/// Grants the peer request ids for as many requests as it may hold live beside those it
	/// holds ([`request_limit`]): a peer holding its limit gets none until some end, and one more
	/// is TOO_MANY_REQUESTS. Sent in steps of an eighth of the limit, not one message a request.
	async fn regrant(&self) {
		let limit = request_limit(&self.config);
		let room = limit.saturating_sub(self.live_requests() as u64);
		let want = self.expected.get() + 2 * room;
		let step = 2 * (limit / 8).max(1);
		if want >= self.granted.get() + step {
			self.granted.set(want);
			self.send(Message::MaxRequestId(want)).await;
		}
	}

	/// Our next request id, once the peer's grant allows one.
	async fn next_request_id_granted(&self) -> u64 {
		let grants = self.grants.consume();
		loop {
			let seen = *grants.read();
			if let Some(id) = self.our_request_id() {
				return id;
			}
			let grew = grants.wait(|count| match *count != seen {
				true => std::task::Poll::Ready(()),
				false => std::task::Poll::Pending,
			});
			if grew.await.is_err() {
				// The session is gone; this task is aborted with it.
				std::future::pending::<()>().await;
			}
		}
	}

	/// Our next request id, if the peer's grant allows it.
	fn our_request_id(&self) -> Option<u64> {
		let id = self.next_request_id.get();
		if id >= self.peer_max.get() {
			return None;
		}
		self.next_request_id.set(id + 2);
		Some(id)
	}
}

/// Requests the peer may hold live at once (subscriptions, namespace subscriptions, published
/// namespaces, all together): the session's subscription limit.
fn request_limit(config: &Config) -> u64 {
	config.limits.subscriptions.clamp(1, 1 << 20) as u64
}

/// What to grant a peer on `peer_side` in SETUP: ids for as many requests as it may hold live
/// (the session's subscription limit), in its parity.
pub fn initial_grant(config: &Config, peer_side: Side) -> u64 {
	let first = match peer_side {
		Side::Client => 0,
		Side::Server => 1,
	};
	first + 2 * request_limit(config)
}

/// A running session. Dropping it closes the transport and stops its tasks.
pub struct Session<T: Transport + 'static> {
	inner: Rc<Inner<T>>,
	_tasks: Vec<Task>,
}

impl<T: Transport + 'static> Session<T> {
	/// Ready with the close code once the session ended.
	pub async fn closed(&self) -> u64 {
		self.inner.transport.closed().await
	}

	/// Closes with `code`.
	pub fn close(&self, code: u64) {
		self.inner.close(code);
	}

	/// Asks the peer to move (GOAWAY without a URI: wherever it sees fit), as a relay does
	/// before it shuts down; the session goes on until either side closes it. Best effort: a
	/// full control queue leaves it out.
	pub fn go_away(&self) {
		let _ = self.inner.out.try_push(Message::Goaway { uri: String::new() });
	}
}

impl<T: Transport + 'static> Drop for Session<T> {
	/// Closes the transport and ends everything the session runs: the tasks in its maps hold the
	/// session's state, so they would outlive it (and keep the peer's namespaces published)
	/// unless aborted here. Each map is taken out first and dropped outside its borrow.
	fn drop(&mut self) {
		self.inner.out.close();
		self.inner.close(code::NO_ERROR);
		let subscriptions = std::mem::take(&mut *self.inner.subscriptions.borrow_mut());
		let fetches = std::mem::take(&mut *self.inner.fetches.borrow_mut());
		let announcers = std::mem::take(&mut *self.inner.announcers.borrow_mut());
		let mirrored = std::mem::take(&mut *self.inner.mirrored.borrow_mut());
		let pending = std::mem::take(&mut *self.inner.pending.borrow_mut());
		let upstream = std::mem::take(&mut *self.inner.upstream.borrow_mut());
		let closing = std::mem::take(&mut *self.inner.closing.borrow_mut());
		drop((subscriptions, fetches, announcers, pending, upstream, closing));
		// The peer's namespaces end as a dropped publisher's.
		for (_, mirrored) in mirrored {
			mirrored.broadcast.abort(model::Error::Dropped);
		}
	}
}

/// Starts the session's halves over `control` (see the module docs).
pub fn start<T: Transport + Clone + 'static>(
	transport: T,
	control: Control<T>,
	config: Config,
	peer: PeerSetup,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
) -> Session<T> {
	let (ours, theirs) = match control.side {
		Side::Client => (0, 1),
		Side::Server => (1, 0),
	};
	let budget = SessionBudget::new(config.limits, config.counters.clone(), config.memory.clone());
	// What SETUP granted the peer, whatever the limits set since.
	let granted = control.granted;
	let inner = Rc::new(Inner {
		transport,
		config,
		side: control.side,
		version: control.version,
		out: Queue::bounded(CONTROL_QUEUE),
		next_request_id: Cell::new(ours),
		peer_max: Cell::new(peer.max_request_id),
		expected: Cell::new(theirs),
		granted: Cell::new(granted),
		subscriptions: RefCell::default(),
		fetches: RefCell::default(),
		announcers: RefCell::default(),
		announced: RefCell::default(),
		pending: RefCell::default(),
		aliases: kio::sync::Producer::new(0),
		upstream: RefCell::default(),
		mirrored: RefCell::default(),
		mirrored_ids: RefCell::default(),
		namespace_streams: Cell::new(0),
		publish,
		subscribe,
		closed: Cell::new(None),
		budget,
		closing: RefCell::default(),
		grants: kio::sync::Producer::new(0),
	});
	let Control { send, reader, .. } = control;
	let mut tasks = vec![
		Task(kio::spawn(write_control(inner.clone(), send))),
		Task(kio::spawn(read_control(inner.clone(), reader))),
		Task(kio::spawn(accept_streams(inner.clone()))),
	];
	if inner.subscribe.is_some() {
		tasks.push(Task(kio::spawn(ask_for_namespaces(inner.clone()))));
	}
	if inner.version >= Version::Draft16 {
		tasks.push(Task(kio::spawn(accept_namespace_streams(inner.clone()))));
	}
	Session { inner, _tasks: tasks }
}

async fn write_control<T: Transport + 'static>(inner: Rc<Inner<T>>, mut send: T::SendHalf) {
	while let Some(message) = inner.out.pop().await {
		if write(&mut send, &message, inner.version).await.is_err() {
			// The peer stopped (or reset) the control stream, which may not end with the session
			// live; a connection already closed keeps its own code.
			inner.fail(&violation("the control stream was stopped"));
			return;
		}
	}
}

async fn read_control<T: Transport + Clone + 'static>(inner: Rc<Inner<T>>, mut reader: Reader<T::RecvHalf>) {
	// What the control stream holds unread is the peer's too (at most a message of 64 KiB and a
	// chunk), charged from here as its data streams' partial objects are.
	if let Err(err) = reader.charge_to(&inner.budget) {
		inner.fail(&err.into());
		return;
	}
	loop {
		let version = inner.version;
		let message = match read_message(&mut reader, version).await {
			Ok(Some(message)) => message,
			// The control stream may not end while the session lives.
			Ok(None) => {
				inner.fail(&violation("the control stream ended"));
				return;
			}
			Err(err) => {
				inner.fail(&err);
				return;
			}
		};
		if let Err(err) = handle(&inner, message).await {
			inner.fail(&err);
			return;
		}
	}
}

async fn handle<T: Transport + Clone + 'static>(inner: &Rc<Inner<T>>, message: Message) -> Result<(), Error> {
	match message {
		Message::ClientSetup { .. } | Message::ServerSetup { .. } => return Err(violation("a second SETUP")),
		Message::Goaway { uri } => {
			if inner.side == Side::Server && !uri.is_empty() {
				return Err(violation("a client's GOAWAY named a URI"));
			}
			// Nothing new is asked of a peer that is leaving; what runs goes on.
		}
		Message::MaxRequestId(max) => {
			if max <= inner.peer_max.get() {
				return Err(violation("MAX_REQUEST_ID did not grow"));
			}
			inner.peer_max.set(max);
			if let Ok(mut count) = inner.grants.write() {
				*count += 1;
			}
		}
		Message::RequestsBlocked(_) => {}
		Message::SubscribeNamespace { request_id, prefix, .. } => {
			if inner.version >= Version::Draft16 {
				return Err(violation("SUBSCRIBE_NAMESPACE on the control stream"));
			}
			inner.take_request_id(request_id)?;
			subscribe_namespace(inner, request_id, prefix).await;
		}
		Message::Namespace(_) | Message::NamespaceDone(_) => {
			return Err(violation("NAMESPACE on the control stream"));
		}
		Message::PublishNamespaceDoneRequest(request_id) => {
			let namespace = inner.mirrored_ids.borrow_mut().remove(&request_id);
			if let Some(namespace) = namespace {
				let mirrored = inner.mirrored.borrow_mut().remove(&namespace);
				if let Some(mirrored) = mirrored {
					mirrored.broadcast.finish();
				}
			}
		}
		// draft-16: we answer SUBSCRIBE_NAMESPACE with NAMESPACE, never PUBLISH_NAMESPACE.
		Message::PublishNamespaceCancelRequest(_) => {}
		Message::UnsubscribeNamespace(prefix) => {
			inner.announcers.borrow_mut().remove(&prefix);
		}
		Message::Subscribe(subscribe) => {
			inner.take_request_id(subscribe.request_id)?;
			serve_subscribe(inner, subscribe).await;
		}
		Message::SubscribeUpdate { request_id, .. } => {
			inner.take_request_id(request_id)?;
			// We apply no update: draft-14 has no answer for it; from 15 on one is awaited, and a
			// peer is told plainly rather than left waiting.
			if inner.version >= Version::Draft15 {
				refuse(inner, Message::SubscribeError, request_id).await;
			}
		}
		Message::Unsubscribe(request_id) => {
			if inner.subscriptions.borrow_mut().remove(&request_id).is_some() {
				inner
					.send(Message::PublishDone {
						request_id,
						status: done_code::SUBSCRIPTION_ENDED,
						stream_count: (1 << 62) - 1,
						reason: String::new(),
					})
					.await;
			}
		}
		Message::PublishNamespace {
			request_id, namespace, ..
		} => {
			inner.take_request_id(request_id)?;
			take_namespace(inner, request_id, namespace).await;
		}
		Message::PublishNamespaceDone(namespace) => {
			if let Some(mirrored) = inner.mirrored.borrow_mut().remove(&namespace) {
				mirrored.broadcast.finish();
			}
		}
		Message::SubscribeOk(ok) => {
			// Its objects may come at once: the alias is known from here.
			let Some((track, waiting)) = inner.pending.borrow_mut().remove(&ok.request_id) else {
				return Err(violation("SUBSCRIBE_OK to nothing we asked"));
			};
			if inner.upstream.borrow().contains_key(&ok.track_alias) {
				return Err(Error::Protocol(
					code::DUPLICATE_TRACK_ALIAS,
					"a track alias given twice",
				));
			}
			let upstream = Upstream {
				track,
				request_id: ok.request_id,
			};
			inner.upstream.borrow_mut().insert(ok.track_alias, upstream);
			if let Ok(mut count) = inner.aliases.write() {
				*count += 1;
			}
			let _ = waiting.try_push(Reply::Subscribed(ok));
		}
		Message::SubscribeError(error) => {
			let waiting = inner.pending.borrow_mut().remove(&error.request_id);
			if let Some((_, waiting)) = waiting {
				let _ = waiting.try_push(Reply::Refused(error));
			}
		}
		Message::PublishDone { request_id, status, .. } => {
			let alias = {
				let upstream = inner.upstream.borrow();
				upstream
					.iter()
					.find(|(_, u)| u.request_id == request_id)
					.map(|(a, _)| *a)
			};
			if let Some(alias) = alias {
				// Its last streams may still be on their way (they race the control stream):
				// the alias stays known for a moment, then the track ends.
				let ending = Task(kio::spawn(end_upstream(inner.clone(), alias, status)));
				let mut closing = inner.closing.borrow_mut();
				closing.retain(|task| !task.0.is_finished());
				closing.push(ending);
			}
		}

		// Replies to our PUBLISH_NAMESPACE and SUBSCRIBE_NAMESPACE: nothing waits on them.
		Message::PublishNamespaceOk(_)
		| Message::PublishNamespaceError(_)
		| Message::SubscribeNamespaceOk(_)
		| Message::SubscribeNamespaceError(_)
		| Message::RequestOk { .. } => {}
		Message::UnsubscribeNamespaceRequest(request_id) => {
			inner.announcers.borrow_mut().retain(|_, (id, _)| *id != request_id);
		}
		Message::PublishNamespaceCancel { namespace, .. } => {
			// The peer takes no more of one namespace we announced: it hears no DONE for it (a
			// broadcast published there afresh is announced afresh). A cancel of a namespace we
			// did not announce changes nothing.
			inner.announced.borrow_mut().remove(&namespace);
		}
		Message::Fetch {
			request_id,
			subscriber_priority,
			kind,
			..
		} => {
			inner.take_request_id(request_id)?;
			serve_fetch(inner, request_id, subscriber_priority, kind).await;
		}
		Message::TrackStatus(status) => {
			inner.take_request_id(status.request_id)?;
			track_status(inner, status).await;
		}
		Message::Publish { request_id, .. } => {
			inner.take_request_id(request_id)?;
			refuse(inner, Message::PublishError, request_id).await;
		}
		// Replies to requests we never make.
		Message::FetchOk { .. }
		| Message::FetchError(_)
		| Message::TrackStatusOk(_)
		| Message::TrackStatusError(_)
		| Message::PublishOk { .. }
		| Message::PublishError(_) => return Err(violation("a reply to nothing we asked")),
		Message::FetchCancel(request_id) => {
			// Its stream is reset as its task ends.
			inner.fetches.borrow_mut().remove(&request_id);
		}
	}
	inner.regrant().await;
	Ok(())
}

async fn refuse<T: Transport + 'static>(inner: &Inner<T>, kind: fn(RequestError) -> Message, request_id: u64) {
	let error = RequestError {
		request_id,
		code: request_code::NOT_SUPPORTED,
		retry_interval: 0,
		reason: "not supported".into(),
	};
	inner.send(error_message(inner.version, kind, error)).await;
}

/// A refusal as `version` sends it: draft-14's message of its kind, draft-15's REQUEST_ERROR
/// (0x05: SUBSCRIBE_ERROR's layout).
fn error_message(version: Version, kind: fn(RequestError) -> Message, error: RequestError) -> Message {
	match version {
		Version::Draft14 => kind(error),
		Version::Draft15 | Version::Draft16 => Message::SubscribeError(error),
	}
}

/// A request done, as `version` says it: draft-14's message of its kind, draft-15's REQUEST_OK.
fn ok_message(version: Version, kind: fn(u64) -> Message, request_id: u64) -> Message {
	match version {
		Version::Draft14 => kind(request_id),
		Version::Draft15 | Version::Draft16 => Message::RequestOk {
			request_id,
			params: Parameters::default(),
		},
	}
}

/// DOES_NOT_EXIST's code in `version`.
fn does_not_exist(version: Version) -> u64 {
	match version {
		Version::Draft14 => request_code::DOES_NOT_EXIST,
		Version::Draft15 | Version::Draft16 => request_code::DOES_NOT_EXIST_15,
	}
}

// --- the publisher half ----------------------------------------------------------------------

/// Answers a SUBSCRIBE_NAMESPACE: OK, then the broadcasts under the prefix as they come and go.
async fn subscribe_namespace<T: Transport + 'static>(inner: &Rc<Inner<T>>, request_id: u64, prefix: Namespace) {
	let Some(origin) = &inner.publish else {
		// Nothing to announce: the set is simply empty.
		inner
			.send(ok_message(inner.version, Message::SubscribeNamespaceOk, request_id))
			.await;
		return;
	};
	if inner.announcers.borrow().len() >= inner.config.limits.subscriptions {
		let error = RequestError {
			request_id,
			code: request_code::INTERNAL_ERROR,
			retry_interval: 0,
			reason: "too many namespace subscriptions".into(),
		};
		inner
			.send(error_message(inner.version, Message::SubscribeNamespaceError, error))
			.await;
		return;
	}
	inner
		.send(ok_message(inner.version, Message::SubscribeNamespaceOk, request_id))
		.await;
	let cursor = origin.announced(&Path::new(&prefix.to_path()));
	let task = Task(kio::spawn(announce(inner.clone(), cursor)));
	inner.announcers.borrow_mut().insert(prefix, (request_id, task));
}

async fn announce<T: Transport + 'static>(inner: Rc<Inner<T>>, mut cursor: model::AnnounceCursor) {
	loop {
		let update = cursor.next().await;
		// The path is the whole namespace (relative to the session's root, not the prefix's).
		let namespace = Namespace::from_path(update.path.as_str());
		if update.broadcast.is_some() {
			// The peer's grant spent, this namespace waits for more (MAX_REQUEST_ID).
			let request_id = inner.next_request_id_granted().await;
			*inner.announced.borrow_mut().entry(namespace.clone()).or_default() += 1;
			let params = Parameters::default();
			inner
				.send(Message::PublishNamespace {
					request_id,
					namespace,
					params,
				})
				.await;
		} else {
			let cancelled = {
				let mut announced = inner.announced.borrow_mut();
				match announced.get_mut(&namespace) {
					Some(count) if *count > 1 => {
						*count -= 1;
						false
					}
					Some(_) => {
						announced.remove(&namespace);
						false
					}
					None => true,
				}
			};
			if !cancelled {
				inner.send(Message::PublishNamespaceDone(namespace)).await;
			}
		}
	}
}

/// draft-16: takes the peer's SUBSCRIBE_NAMESPACE streams (the only bidirectional streams
/// after the control stream).
async fn accept_namespace_streams<T: Transport + 'static>(inner: Rc<Inner<T>>) {
	let mut running: Vec<Task> = Vec::new();
	loop {
		let Ok((send, recv)) = inner.transport.accept_bi().await else {
			return;
		};
		running.retain(|task| !task.0.is_finished());
		running.push(Task(kio::spawn(namespace_stream(inner.clone(), send, recv))));
	}
}

/// Counts a SUBSCRIBE_NAMESPACE stream among the peer's live requests while it lives.
struct NamespaceStream<'a, T: Transport + 'static>(&'a Inner<T>);

impl<T: Transport + 'static> Drop for NamespaceStream<'_, T> {
	fn drop(&mut self) {
		self.0.namespace_streams.set(self.0.namespace_streams.get() - 1);
	}
}

/// One draft-16 SUBSCRIBE_NAMESPACE: REQUEST_OK (or REQUEST_ERROR and FIN), then a NAMESPACE
/// for each broadcast under the prefix (by its fields after the prefix's) and NAMESPACE_DONE as
/// each goes, until the peer ends its side of the stream.
async fn namespace_stream<T: Transport + 'static>(inner: Rc<Inner<T>>, mut send: T::SendHalf, recv: T::RecvHalf) {
	let version = inner.version;
	let mut reader = Reader::charged(recv, &inner.budget);
	let first = match read_message(&mut reader, version).await {
		Ok(Some(message)) => message,
		Ok(None) | Err(Error::Transport(_) | Error::Refused(_)) => return,
		Err(err) => {
			inner.fail(&err);
			return;
		}
	};
	let Message::SubscribeNamespace {
		request_id,
		prefix,
		options,
		..
	} = first
	else {
		inner.fail(&violation("a stream that did not open with SUBSCRIBE_NAMESPACE"));
		return;
	};
	if let Err(err) = inner.take_request_id(request_id) {
		inner.fail(&err);
		return;
	}
	let held = inner.announcers.borrow().len() + inner.namespace_streams.get();
	if held >= inner.config.limits.subscriptions {
		let error = RequestError {
			request_id,
			code: request_code::INTERNAL_ERROR,
			retry_interval: 0,
			reason: "too many namespace subscriptions".into(),
		};
		let _ = write(&mut send, &Message::SubscribeError(error), version).await;
		let _ = send.finish();
		return;
	}
	inner.namespace_streams.set(inner.namespace_streams.get() + 1);
	let _live = NamespaceStream(&inner);
	let ok = ok_message(version, Message::SubscribeNamespaceOk, request_id);
	if write(&mut send, &ok, version).await.is_err() {
		return;
	}
	inner.regrant().await;
	// Without an origin to announce from, or asked only for PUBLISH (we push no tracks), the
	// set is empty: the stream stays until the peer ends it.
	let cursor = match (&inner.publish, options) {
		(Some(origin), subscribe_options::NAMESPACE | subscribe_options::BOTH) => {
			Some(origin.announced(&Path::new(&prefix.to_path())))
		}
		_ => None,
	};
	let announcing = async {
		let Some(mut cursor) = cursor else {
			return std::future::pending::<()>().await;
		};
		loop {
			let update = cursor.next().await;
			// The namespace's fields after the prefix's (the path is the whole namespace).
			let mut suffix = Namespace::from_path(update.path.as_str());
			suffix.0.drain(..prefix.0.len().min(suffix.0.len()));
			let message = match update.broadcast {
				Some(_) => Message::Namespace(suffix),
				None => Message::NamespaceDone(suffix),
			};
			if write(&mut send, &message, version).await.is_err() {
				return;
			}
		}
	};
	// Nothing more may come on the stream: its end is the unsubscribe.
	let ended = read_message(&mut reader, version);
	if let kio::Either::Right(Ok(Some(_)) | Err(Error::Protocol(..))) = kio::race(announcing, ended).await {
		inner.fail(&violation("a message after SUBSCRIBE_NAMESPACE on its stream"));
	}
}

/// Answers a SUBSCRIBE: the track's groups, or SUBSCRIBE_ERROR.
async fn serve_subscribe<T: Transport + 'static>(inner: &Rc<Inner<T>>, subscribe: Subscribe) {
	let request_id = subscribe.request_id;
	let refused = |code, reason: &str| {
		Message::SubscribeError(RequestError {
			request_id,
			code,
			retry_interval: 0,
			reason: reason.into(),
		})
	};
	let Some(origin) = &inner.publish else {
		inner
			.send(refused(does_not_exist(inner.version), "nothing published here"))
			.await;
		return;
	};
	if inner.subscriptions.borrow().len() >= inner.config.limits.subscriptions {
		inner
			.send(refused(request_code::INTERNAL_ERROR, "too many subscriptions"))
			.await;
		return;
	}
	let path = Path::new(&subscribe.namespace.to_path());
	let cursor = origin
		.broadcast(&path)
		.and_then(|broadcast| broadcast.subscribe_track(&subscribe.name, Subscription::default()));
	let Ok(mut cursor) = cursor else {
		inner
			.send(refused(does_not_exist(inner.version), "no such track"))
			.await;
		return;
	};
	// From the latest group now (LargestObject: the live edge, its group whole, as moq-lite
	// serves a new subscriber), or from the first to come: fixed here, not when the sending
	// task first looks, so groups that arrive meanwhile are not skipped.
	let start = cursor.latest().map_or(0, |group| group.sequence());
	cursor.start_at(start);
	let ok = SubscribeOk {
		request_id,
		// One alias per subscription: its request id, unique in the session.
		track_alias: request_id,
		expires: 0,
		group_order: 2,
		largest: None,
		params: Parameters::default(),
	};
	inner.send(Message::SubscribeOk(ok)).await;
	let task = Task(kio::spawn(send_track(
		inner.clone(),
		request_id,
		subscribe.subscriber_priority,
		cursor,
	)));
	let serving = Serving {
		_task: task,
		namespace: subscribe.namespace,
		name: subscribe.name,
		start,
	};
	inner.subscriptions.borrow_mut().insert(request_id, serving);
}

/// Answers a TRACK_STATUS from the track's cache: the largest location it holds, if any
/// (draft-14's TRACK_STATUS_OK, a SUBSCRIBE_OK of alias 0; from 15 on REQUEST_OK with
/// LARGEST_OBJECT), or DOES_NOT_EXIST. Nothing is subscribed.
async fn track_status<T: Transport + 'static>(inner: &Rc<Inner<T>>, status: Subscribe) {
	let version = inner.version;
	let request_id = status.request_id;
	let path = Path::new(&status.namespace.to_path());
	let track = inner
		.publish
		.as_ref()
		.and_then(|origin| origin.broadcast(&path).ok())
		.and_then(|broadcast| broadcast.track(&status.name).ok());
	let Some(track) = track else {
		let error = RequestError {
			request_id,
			code: does_not_exist(version),
			retry_interval: 0,
			reason: "no such track".into(),
		};
		inner
			.send(error_message(version, Message::TrackStatusError, error))
			.await;
		return;
	};
	let mut largest = None;
	if let Some(group) = track.latest() {
		let sequence = group.sequence();
		let held = objects_held(group).await;
		largest = held.checked_sub(1).map(|object| Location {
			group: sequence,
			object,
		});
	}
	let reply = match version {
		Version::Draft14 => Message::TrackStatusOk(SubscribeOk {
			request_id,
			track_alias: 0,
			expires: 0,
			group_order: 2,
			largest,
			params: Parameters::default(),
		}),
		_ => {
			let mut params = Parameters::default();
			if let Some(largest) = largest {
				let mut location = Vec::new();
				let _ = largest.emit(&mut location);
				params = params.with_bytes(super::message::param::LARGEST_OBJECT, location);
			}
			Message::RequestOk { request_id, params }
		}
	};
	inner.send(reply).await;
}

/// Answers a FETCH from the track's cache: FETCH_OK, then one stream of the cached objects in
/// its range, oldest group first, each with its location (FETCH_ERROR, or REQUEST_ERROR, if the
/// track or the joined subscription is unknown, or, in draft-14, if nothing is in range).
///
/// A standalone FETCH names its range; a joining one ends where its subscription's first group
/// begins (we serve a subscription from the start of the latest group) and starts `start`
/// groups before it (relative) or at group `start` (absolute). What the cache no longer holds is
/// left out, and of a group still being written, what it holds now: a FETCH never waits for
/// objects. While its stream is written it holds one group at a time, taken from the cache as
/// it comes to it (one evicted meanwhile is left out): a peer that never reads a FETCH's stream
/// pins one group, as a stalled subscription stream does, not the cache as it was.
async fn serve_fetch<T: Transport + 'static>(inner: &Rc<Inner<T>>, request_id: u64, priority: u8, kind: FetchKind) {
	let version = inner.version;
	let refuse = |code, reason: &str| {
		let error = RequestError {
			request_id,
			code,
			retry_interval: 0,
			reason: reason.into(),
		};
		error_message(version, Message::FetchError, error)
	};
	let Some(origin) = &inner.publish else {
		inner
			.send(refuse(does_not_exist(version), "nothing published here"))
			.await;
		return;
	};
	if inner.fetches.borrow().len() >= inner.config.limits.subscriptions {
		inner
			.send(refuse(request_code::INTERNAL_ERROR, "too many fetches"))
			.await;
		return;
	}
	// The track, the first location, and the last group with the object after its last (0: the
	// whole group); none for a joining FETCH of nothing.
	let (namespace, name, start, end) = match kind {
		FetchKind::Standalone {
			namespace,
			name,
			start,
			end,
		} => (namespace, name, start, Some(end)),
		FetchKind::Joining {
			relative,
			subscription,
			start,
		} => {
			let joined = inner
				.subscriptions
				.borrow()
				.get(&subscription)
				.map(|serving| (serving.namespace.clone(), serving.name.clone(), serving.start));
			let Some((namespace, name, first)) = joined else {
				let code = match version {
					Version::Draft14 => request_code::INVALID_JOINING_REQUEST_ID,
					_ => request_code::INVALID_JOINING_REQUEST_ID_15,
				};
				inner.send(refuse(code, "no such subscription")).await;
				return;
			};
			let from = match relative {
				true => first.saturating_sub(start),
				false => start,
			};
			// Up to the subscription's first group, whole; nothing if that is where it starts.
			let last = first.checked_sub(1).filter(|last| *last >= from);
			let end = last.map(|group| Location { group, object: 0 });
			(namespace, name, Location { group: from, object: 0 }, end)
		}
	};
	let path = Path::new(&namespace.to_path());
	let Ok(track) = origin.broadcast(&path).and_then(|broadcast| broadcast.track(&name)) else {
		inner.send(refuse(does_not_exist(version), "no such track")).await;
		return;
	};
	// Each cached group in range: its objects from `from` to before `until`, as many as it
	// holds now.
	let mut ranges = Vec::new();
	for sequence in track.cached_sequences() {
		let Some(end) = end.filter(|end| (start.group..=end.group).contains(&sequence)) else {
			continue;
		};
		let Some(group) = track.get_group(sequence) else {
			continue;
		};
		let held = objects_held(group).await;
		let from = if sequence == start.group { start.object } else { 0 };
		let until = match end.object {
			object if object != 0 && sequence == end.group => held.min(object),
			_ => held,
		};
		if from < until {
			ranges.push(FetchRange { sequence, from, until });
		}
	}
	if ranges.is_empty() && version == Version::Draft14 {
		inner
			.send(refuse(request_code::NO_OBJECTS, "nothing cached in range"))
			.await;
		return;
	}
	// The object after the last sent, or the start if none is.
	let end = ranges.last().map_or(start, |range| Location {
		group: range.sequence,
		object: range.until,
	});
	let ok = Message::FetchOk {
		request_id,
		group_order: 1,
		end_of_track: false,
		end,
		params: Parameters::default(),
	};
	inner.send(ok).await;
	let task = Task(kio::spawn(write_fetch(
		inner.clone(),
		request_id,
		priority,
		track,
		ranges,
	)));
	inner.fetches.borrow_mut().insert(request_id, task);
}

/// How many objects `group` holds now (a group still being written is not waited for).
async fn objects_held(mut group: model::GroupConsumer) -> u64 {
	let mut held = 0;
	while let kio::Either::Left(Ok(Some(_))) = kio::race(group.read_frame(), std::future::ready(())).await {
		held += 1;
	}
	held
}

/// A group's objects a FETCH sends: from `from` to before `until`.
struct FetchRange {
	sequence: u64,
	from: u64,
	until: u64,
}

/// Writes a FETCH's stream: its header, then each object's location and payload; FIN at the end
/// (reset if a write fails).
async fn write_fetch<T: Transport + 'static>(
	inner: Rc<Inner<T>>,
	request_id: u64,
	priority: u8,
	track: TrackConsumer,
	ranges: Vec<FetchRange>,
) {
	let version = inner.version;
	if let Ok(send) = inner.transport.open_uni().await {
		// Reset if a FETCH_CANCEL aborts it.
		let mut send = Sending::resetting_with(send, stream_code::CANCELLED);
		// Below the subscriptions' streams of the same priority: a FETCH fills in the past.
		send.send
			.set_priority(crate::lite::session::stream_priority(255 - priority, false, 0, 0) - 1);
		let mut out = Vec::new();
		let mut written = encode_varint(FETCH_HEADER, &mut out).and_then(|()| encode_varint(request_id, &mut out));
		'ranges: for range in ranges {
			// Evicted since the FETCH was answered: left out.
			let Some(mut group) = track.get_group(range.sequence) else {
				continue;
			};
			for object in 0..range.until {
				let Ok(Some(frame)) = group.read_frame().await else {
					continue 'ranges;
				};
				if object < range.from {
					continue;
				}
				let mut payload = frame.payload;
				let header = FetchObject {
					group: range.sequence,
					subgroup: 0,
					object,
					publisher_priority: 128,
					extensions: None,
					length: payload.len() as u64,
					status: status::NORMAL,
				};
				written = written.and_then(|()| header.emit_for(version, &mut out));
				if written.is_err() {
					break 'ranges;
				}
				let mut head = Bytes::from(std::mem::take(&mut out));
				if kio::wait(|w| send.send.poll_write(w, &mut head)).await.is_err()
					|| kio::wait(|w| send.send.poll_write(w, &mut payload)).await.is_err()
				{
					written = Err(crate::coding::EncodeError::BoundsExceeded);
					break 'ranges;
				}
			}
		}
		match written {
			Ok(()) => {
				let mut head = Bytes::from(out);
				if kio::wait(|w| send.send.poll_write(w, &mut head)).await.is_ok() {
					let _ = send.finish();
				}
			}
			Err(_) => send.reset(0),
		}
	}
	inner.fetches.borrow_mut().remove(&request_id);
}

/// Sends a subscription's groups, each on a stream of its own, newer ones first, at most the
/// session's groups in flight at once (the oldest is reset to make room); PUBLISH_DONE at the end.
async fn send_track<T: Transport + 'static>(
	inner: Rc<Inner<T>>,
	request_id: u64,
	priority: u8,
	mut cursor: TrackConsumer,
) {
	let mut in_flight: std::collections::VecDeque<Task> = std::collections::VecDeque::new();
	let mut streams = 0u64;
	let mut first = None;
	let status = loop {
		match cursor.recv_group().await {
			Ok(Some(group)) => {
				in_flight.retain(|task| !task.0.is_finished());
				if in_flight.len() >= inner.config.limits.groups_in_flight {
					in_flight.pop_front();
					if let Some(counters) = &inner.config.counters {
						counters.groups_lost[crate::lite::session::GroupLoss::InFlight as usize]
							.fetch_add(1, Ordering::Relaxed);
					}
				}
				streams += 1;
				let first = *first.get_or_insert_with(|| group.sequence());
				// The drafts' 0 is first; a stream's higher priority is.
				let rank = crate::lite::session::stream_priority(255 - priority, false, first, group.sequence());
				in_flight.push_back(Task(kio::spawn(send_group(inner.clone(), request_id, rank, group))));
			}
			Ok(None) => break done_code::TRACK_ENDED,
			Err(_) => break done_code::INTERNAL_ERROR,
		}
	};
	// Every stream is done before PUBLISH_DONE (draft-14 §9.12).
	for task in &mut in_flight {
		let _ = (&mut task.0).await;
	}
	inner
		.send(Message::PublishDone {
			request_id,
			status,
			stream_count: streams,
			reason: String::new(),
		})
		.await;
	inner.subscriptions.borrow_mut().remove(&request_id);
}

async fn send_group<T: Transport + 'static>(
	inner: Rc<Inner<T>>,
	alias: u64,
	rank: i32,
	mut group: model::GroupConsumer,
) {
	let Ok(send) = inner.transport.open_uni().await else {
		return;
	};
	// Reset, not finished, if its task is aborted to make room for newer groups: the drafts'
	// DELIVERY_TIMEOUT (the subscriber read slower than the track came).
	let mut send = Sending::resetting_with(send, stream_code::DELIVERY_TIMEOUT);
	let sequence = group.sequence();
	// As moq-lite's: the subscriber's priority, then newer groups first.
	send.send.set_priority(rank);
	send.send.set_group(sequence);
	let header = SubgroupHeader {
		track_alias: alias,
		group: sequence,
		subgroup: SubgroupId::Zero,
		publisher_priority: Some(128),
		extensions: false,
		end_of_group: true,
	};
	let mut out = Vec::new();
	header.encode(&mut out);
	loop {
		match group.read_frame().await {
			Ok(Some(frame)) => {
				let object = ObjectHeader {
					id_delta: 0,
					extensions: None,
					length: frame.payload.len() as u64,
					status: status::NORMAL,
				};
				if object.emit(&mut out).is_err() {
					send.reset(0);
					return;
				}
				let mut head = Bytes::from(std::mem::take(&mut out));
				let mut payload = frame.payload.clone();
				if kio::wait(|w| send.send.poll_write(w, &mut head)).await.is_err()
					|| kio::wait(|w| send.send.poll_write(w, &mut payload)).await.is_err()
				{
					return;
				}
				if let Some(counters) = &inner.config.counters {
					counters
						.bytes_out
						.fetch_add(frame.payload.len() as u64, Ordering::Relaxed);
				}
			}
			Ok(None) => {
				if !out.is_empty() {
					let mut head = Bytes::from(out);
					if kio::wait(|w| send.send.poll_write(w, &mut head)).await.is_err() {
						return;
					}
				}
				let _ = send.finish();
				if let Some(counters) = &inner.config.counters {
					counters.groups_out.fetch_add(1, Ordering::Relaxed);
				}
				return;
			}
			Err(_) => {
				send.reset(0);
				return;
			}
		}
	}
}

// --- the subscriber half ---------------------------------------------------------------------

/// Asks the peer for every namespace it publishes (the root prefix): on the control stream
/// (drafts 14 and 15; PUBLISH_NAMESPACE requests answer), or on a stream of its own (draft-16;
/// NAMESPACE and NAMESPACE_DONE answer there, and PUBLISH_NAMESPACE may still come unasked).
async fn ask_for_namespaces<T: Transport + Clone + 'static>(inner: Rc<Inner<T>>) {
	let Some(request_id) = inner.our_request_id() else {
		return;
	};
	let version = inner.version;
	let mut request = Message::SubscribeNamespace {
		request_id,
		prefix: Namespace::default(),
		options: subscribe_options::BOTH,
		params: Parameters::default(),
	};
	if version < Version::Draft16 {
		inner.send(request).await;
		return;
	}
	if let Message::SubscribeNamespace { options, .. } = &mut request {
		*options = subscribe_options::NAMESPACE;
	}
	let Ok((mut send, recv)) = inner.transport.open_bi().await else {
		return;
	};
	if write(&mut send, &request, version).await.is_err() {
		return;
	}
	let mut reader = Reader::charged(recv, &inner.budget);
	let result = take_namespaces(&inner, &mut reader).await;
	// However the stream ended, what it gave ends with it.
	let given: Vec<Namespace> = inner
		.mirrored
		.borrow()
		.iter()
		.filter(|(_, mirrored)| mirrored.request_id.is_none())
		.map(|(namespace, _)| namespace.clone())
		.collect();
	for namespace in given {
		let mirrored = inner.mirrored.borrow_mut().remove(&namespace);
		if let Some(mirrored) = mirrored {
			mirrored.broadcast.finish();
		}
	}
	match result {
		Err(err @ Error::Protocol(..)) => inner.fail(&err),
		Err(_) => reader.stop(0),
		Ok(()) => {}
	}
}

/// Reads a draft-16 SUBSCRIBE_NAMESPACE's answer: REQUEST_OK (or REQUEST_ERROR, and the stream
/// ends), then NAMESPACE and NAMESPACE_DONE, into the origin.
async fn take_namespaces<T: Transport + Clone + 'static>(
	inner: &Rc<Inner<T>>,
	reader: &mut Reader<T::RecvHalf>,
) -> Result<(), Error> {
	let version = inner.version;
	match read_message(reader, version).await? {
		Some(Message::RequestOk { .. }) => {}
		// Refused, or nothing: what comes unasked is still taken.
		Some(Message::SubscribeError(_)) | None => return Ok(()),
		Some(_) => return Err(violation("SUBSCRIBE_NAMESPACE answered with neither OK nor error")),
	}
	while let Some(message) = read_message(reader, version).await? {
		match message {
			Message::Namespace(namespace) => {
				if let Err((_, why)) = mirror(inner, namespace, None) {
					tracing::debug!(why, "ietf: a NAMESPACE not taken");
				}
			}
			Message::NamespaceDone(namespace) => {
				let mut mirrored = inner.mirrored.borrow_mut();
				let given = mirrored.get(&namespace).is_some_and(|m| m.request_id.is_none());
				if !given {
					return Err(violation("NAMESPACE_DONE of no NAMESPACE"));
				}
				let done = mirrored.remove(&namespace);
				drop(mirrored);
				if let Some(done) = done {
					done.broadcast.finish();
				}
			}
			_ => return Err(violation("a message a SUBSCRIBE_NAMESPACE stream does not carry")),
		}
	}
	Ok(())
}

/// Takes a PUBLISH_NAMESPACE into the origin, its tracks fetched on demand, and answers it.
async fn take_namespace<T: Transport + Clone + 'static>(inner: &Rc<Inner<T>>, request_id: u64, namespace: Namespace) {
	let reply = match mirror(inner, namespace, Some(request_id)) {
		Ok(()) => ok_message(inner.version, Message::PublishNamespaceOk, request_id),
		Err((code, reason)) => {
			let error = RequestError {
				request_id,
				code,
				retry_interval: 0,
				reason: reason.into(),
			};
			error_message(inner.version, Message::PublishNamespaceError, error)
		}
	};
	inner.send(reply).await;
}

/// Puts the peer's `namespace` into the origin (PUBLISH_NAMESPACE `request_id`, or a draft-16
/// NAMESPACE), its tracks fetched on demand; or why not.
fn mirror<T: Transport + Clone + 'static>(
	inner: &Rc<Inner<T>>,
	namespace: Namespace,
	request_id: Option<u64>,
) -> Result<(), (u64, &'static str)> {
	let Some(origin) = &inner.subscribe else {
		return Err((request_code::NOT_SUPPORTED, "nothing may be published here"));
	};
	if inner.mirrored.borrow().len() >= inner.config.limits.announces {
		return Err((request_code::INTERNAL_ERROR, "too many namespaces"));
	}
	let path = Path::new(&namespace.to_path());
	let broadcast = BroadcastProducer::new();
	if let Some(pool) = &inner.config.pool {
		broadcast.set_pool(pool.clone());
	}
	broadcast.serve_requests();
	let route = match inner.config.cluster {
		true => Route::cluster(Vec::new()),
		false => Route::new(Vec::new()),
	};
	let Ok(publication) = origin.publish(&path, broadcast.consume(), route) else {
		return Err((request_code::UNAUTHORIZED, "outside what this session may publish"));
	};
	let tracks = Task(kio::spawn(serve_requests(
		inner.clone(),
		namespace.clone(),
		broadcast.clone(),
	)));
	if let Some(request_id) = request_id.filter(|_| inner.version >= Version::Draft16) {
		inner.mirrored_ids.borrow_mut().insert(request_id, namespace.clone());
	}
	let old = inner.mirrored.borrow_mut().insert(
		namespace,
		Mirrored {
			request_id,
			broadcast,
			_publication: publication,
			_tracks: tracks,
		},
	);
	if let Some(old) = old {
		if let Some(id) = old.request_id {
			inner.mirrored_ids.borrow_mut().remove(&id);
		}
		old.broadcast.finish();
	}
	Ok(())
}

/// Fetches each track asked of a mirrored broadcast from the peer, at most the session's track
/// requests at once.
async fn serve_requests<T: Transport + 'static>(
	inner: Rc<Inner<T>>,
	namespace: Namespace,
	broadcast: BroadcastProducer,
) {
	let mut running: Vec<Task> = Vec::new();
	while let Some(track) = broadcast.requested_track().await {
		running.retain(|task| !task.0.is_finished());
		if inner.upstream.borrow().len() + inner.pending.borrow().len() >= inner.config.limits.track_requests {
			broadcast.remove_track(&track);
			track.abort(model::Error::BoundsExceeded);
			continue;
		}
		running.push(Task(kio::spawn(forward(
			inner.clone(),
			namespace.clone(),
			broadcast.clone(),
			track,
		))));
	}
}

async fn forward<T: Transport + 'static>(
	inner: Rc<Inner<T>>,
	namespace: Namespace,
	broadcast: BroadcastProducer,
	track: TrackProducer,
) {
	// A draft-14 track has no info to ask for: what moq-lite assumes of a track without it.
	if !track.has_info() {
		track.set_info(TrackInfo::default());
	}
	// As moq-lite's: one upstream SUBSCRIBE per period of demand, until the track has had no
	// demand for a while (a TRACK request's cursor that goes before the SUBSCRIBE that follows
	// it does not cost an UNSUBSCRIBE and a SUBSCRIBE, and the groups published between them).
	loop {
		let mut linger = kio::time::Deadline::new(Some(kio::time::now() + TRACK_IDLE_LINGER));
		let idle = kio::wait(|waiter| {
			if track.poll_used(waiter).is_ready() {
				return std::task::Poll::Ready(false);
			}
			linger.poll_elapsed(waiter).map(|()| true)
		})
		.await;
		if idle || track.is_ended() {
			break;
		}
		if track.subscription().is_none() {
			continue;
		}
		match subscribe_upstream(&inner, &namespace, &track).await {
			Ok(()) => {}
			Err(error) => {
				tracing::debug!(code = error.code, reason = %error.reason, "ietf: a SUBSCRIBE refused");
				track.abort(model::Error::NotFound);
				break;
			}
		}
	}
	broadcast.remove_track(&track);
}

/// An upstream SUBSCRIBE's entries, removed when it ends (UNSUBSCRIBE sent if the peer still
/// serves it).
struct Upstreaming<T: Transport + 'static> {
	inner: Rc<Inner<T>>,
	request_id: u64,
	alias: Option<u64>,
}

impl<T: Transport + 'static> Drop for Upstreaming<T> {
	fn drop(&mut self) {
		// Dropped while the session itself is torn down (its maps borrowed to be emptied),
		// there is nothing to tidy.
		let Ok(mut pending) = self.inner.pending.try_borrow_mut() else {
			return;
		};
		let waiting = pending.remove(&self.request_id);
		drop(pending);
		drop(waiting);
		let served = match (self.alias, self.inner.upstream.try_borrow_mut()) {
			(Some(alias), Ok(mut upstream)) => upstream.remove(&alias),
			_ => None,
		};
		if served.is_some() {
			// Best effort: a full control queue drops it, and the peer's streams are stopped.
			let _ = self.inner.out.try_push(Message::Unsubscribe(self.request_id));
		}
	}
}

/// How long an upstream SUBSCRIBE waits for its SUBSCRIBE_OK or error. A peer that never
/// answers would otherwise keep the track's viewers waiting for as long as they stay; after
/// this the track fails for them (not found) and the request's entry goes.
const REPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// One upstream SUBSCRIBE, until demand ends (UNSUBSCRIBE) or the peer ends it (PUBLISH_DONE).
async fn subscribe_upstream<T: Transport + 'static>(
	inner: &Rc<Inner<T>>,
	namespace: &Namespace,
	track: &TrackProducer,
) -> Result<(), RequestError> {
	let Some(request_id) = inner.our_request_id() else {
		return Err(RequestError {
			request_id: 0,
			code: request_code::INTERNAL_ERROR,
			retry_interval: 0,
			reason: "the peer's grant of request ids is spent".into(),
		});
	};
	let waiting = Queue::bounded(1);
	inner
		.pending
		.borrow_mut()
		.insert(request_id, (track.clone(), waiting.clone()));
	// However this ends (its namespace withdrawn aborts it mid-wait), its entries go and the
	// peer hears UNSUBSCRIBE.
	let mut guard = Upstreaming {
		inner: inner.clone(),
		request_id,
		alias: None,
	};
	let subscribe = Subscribe {
		request_id,
		namespace: namespace.clone(),
		name: track.name(),
		subscriber_priority: 128,
		group_order: 0,
		forward: true,
		filter: Filter::LargestObject,
		params: Parameters::default(),
	};
	inner.send(Message::Subscribe(subscribe)).await;
	let answer = match kio::race(waiting.pop(), kio::time::sleep(REPLY_WAIT)).await {
		kio::Either::Left(answer) => answer,
		kio::Either::Right(()) => {
			return Err(RequestError {
				request_id,
				code: request_code::TIMEOUT,
				retry_interval: 0,
				reason: "no reply to SUBSCRIBE".into(),
			});
		}
	};
	let alias = match answer {
		Some(Reply::Subscribed(ok)) => ok.track_alias,
		Some(Reply::Refused(error)) => return Err(error),
		None => return Ok(()),
	};
	guard.alias = Some(alias);
	let mut seen = 0;
	loop {
		let demand = kio::wait(|waiter| {
			if track.is_ended() || !inner.upstream.borrow().contains_key(&alias) {
				// PUBLISH_DONE, or the track's end.
				return std::task::Poll::Ready(None);
			}
			track.poll_subscription_changed(waiter, &mut seen).map(Some)
		})
		.await;
		match demand {
			// Ended upstream.
			None => return Ok(()),
			Some(Some(_)) => {}
			// Nobody downstream wants it: UNSUBSCRIBE, and start the cache over (the next
			// subscription's groups may be numbered afresh), unless someone came back meanwhile.
			Some(None) => {
				if track.start_over() {
					// The guard says UNSUBSCRIBE.
					return Ok(());
				}
			}
		}
	}
}

/// Ends an upstream subscription the peer ended, once its late streams had [`ALIAS_WAIT`].
async fn end_upstream<T: Transport + 'static>(inner: Rc<Inner<T>>, alias: u64, status: u64) {
	kio::time::sleep(ALIAS_WAIT).await;
	let done = inner.upstream.borrow_mut().remove(&alias);
	if let Some(done) = done {
		match status {
			done_code::TRACK_ENDED => {
				let _ = done.track.finish();
			}
			_ => done.track.abort(model::Error::Dropped),
		}
	}
}

/// Takes the peer's subgroup streams.
async fn accept_streams<T: Transport + 'static>(inner: Rc<Inner<T>>) {
	let mut running: Vec<Task> = Vec::new();
	loop {
		let Ok(recv) = inner.transport.accept_uni().await else {
			return;
		};
		running.retain(|task| !task.0.is_finished());
		running.push(Task(kio::spawn(ingest(inner.clone(), recv))));
	}
}

async fn ingest<T: Transport + 'static>(inner: Rc<Inner<T>>, recv: T::RecvHalf) {
	let mut reader = Reader::charged(recv, &inner.budget);
	if let Err(err) = read_subgroup(&inner, &mut reader).await {
		match err {
			Error::Protocol(..) => inner.fail(&err),
			Error::Transport(_) | Error::Refused(_) => reader.stop(0),
		}
	}
}

/// How long a subgroup stream whose alias we do not know waits for the SUBSCRIBE_OK naming it
/// (it travels on another stream, and may come second), while a SUBSCRIBE of ours is unanswered.
const ALIAS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The track of `alias`, waiting for it while one of our SUBSCRIBEs is unanswered.
async fn upstream_track<T: Transport + 'static>(inner: &Inner<T>, alias: u64) -> Option<TrackProducer> {
	let aliases = inner.aliases.consume();
	let deadline = kio::time::now() + ALIAS_WAIT;
	loop {
		if let Some(upstream) = inner.upstream.borrow().get(&alias) {
			return Some(upstream.track.clone());
		}
		if inner.pending.borrow().is_empty() {
			return None;
		}
		let seen = *aliases.read();
		let changed = aliases.wait(|count| match *count != seen {
			true => std::task::Poll::Ready(()),
			false => std::task::Poll::Pending,
		});
		if let kio::Either::Right(()) = kio::race(changed, kio::time::sleep_until(deadline)).await {
			return None;
		}
	}
}

/// Arrival time in milliseconds since the Unix epoch: draft-14's objects carry no timestamp.
fn arrival_millis() -> u64 {
	let now = std::time::SystemTime::now()
		.duration_since(std::time::UNIX_EPOCH)
		.unwrap_or_default();
	now.as_millis() as u64
}

async fn read_subgroup<T: Transport + 'static, R: RecvStream>(
	inner: &Inner<T>,
	reader: &mut Reader<R>,
) -> Result<(), Error> {
	let version = inner.version;
	let Some(header) = reader
		.decode_with(|buf| {
			// A stream of another type is not ours to read (FETCH_HEADER: we never fetch).
			let mut peek = *buf;
			let kind = crate::coding::decode_varint(&mut peek)?;
			if !SubgroupHeader::is_type(kind, version) {
				return Err(DecodeError::UnexpectedStream(kind));
			}
			SubgroupHeader::decode_for(buf, version)
		})
		.await?
	else {
		return Ok(());
	};
	let Some(track) = upstream_track(inner, header.track_alias).await else {
		// A late stream of a subscription we ended, or of none: not read.
		reader.stop(1);
		return Ok(());
	};
	let Ok(mut group) = track.create_group(header.group) else {
		if let Some(counters) = &inner.config.counters {
			counters.groups_lost[crate::lite::session::GroupLoss::Refused as usize].fetch_add(1, Ordering::Relaxed);
		}
		reader.stop(1);
		return Ok(());
	};
	if let Some(counters) = &inner.config.counters {
		counters.groups_in.fetch_add(1, Ordering::Relaxed);
	}
	let timescale = track.info().timescale;
	loop {
		let object = reader
			.decode_with(|buf| ObjectHeader::decode(buf, header.extensions))
			.await?;
		let Some(object) = object else {
			let _ = group.finish();
			return Ok(());
		};
		if object.length > MAX_OBJECT {
			group.abort(model::Error::TooLarge);
			return Err(violation("an object past our size"));
		}
		if object.status != status::NORMAL {
			// End of group or track, or an object that does not exist: nothing to store.
			continue;
		}
		let Some(payload) = reader.read_exact(object.length as usize).await? else {
			return Err(violation("a stream ended inside an object"));
		};
		if let Some(counters) = &inner.config.counters {
			counters.bytes_in.fetch_add(payload.len() as u64, Ordering::Relaxed);
		}
		let stamp = arrival_millis().saturating_mul(timescale) / 1000;
		if group
			.write_frame(Frame::new(Timestamp::new(stamp, timescale), payload))
			.is_err()
		{
			reader.stop(1);
			return Ok(());
		}
	}
}
