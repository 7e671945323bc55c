//! `scheduler`: instructions per reprioritize and per retire of a send group in moq-quic's send
//! scheduler, by queue size and by the group's place in its ring.
//!
//! ```text
//! scheduler [--sizes 16,256,4096,16384] [--levels 2,8] [--ops 4096] [--runs N]
//!           [--source perf|callgrind|task-clock] [--save]
//! ```
//!
//! `--save` writes `bench/results/scheduler.json` (one object per line) and `scheduler.md`.
//!
//! # What is counted
//!
//! A case is `size` groups, each with one ready stream, spread evenly over `levels` priority
//! levels (so a ring holds `size / levels` groups), and a plan of `ops` operations, every one of
//! which hits a group at the named place of its ring: the front, the middle (`len / 2`) or the
//! tail. The plan is worked out beforehand on a mirror of the rings (plain vectors), so the
//! measured loop only replays it. Under callgrind the process runs with the whole plan and with
//! none of it and the difference is divided by the plan length: building the scheduler and the
//! plan cancels out, and what is left is the measured loop (the operations plus the loop around
//! them, whose cost the `loop` row shows).
//!
//! * `set_priority`: the group moves to the tail of the next level (level `i % levels` gives to
//!   level `i % levels + 1`, so rings stay within one group of their size).
//! * `retire+insert`: `remove_stream` of the group's stream, `retire_group`, then
//!   `insert_group` + `insert_stream` + `ready` of a new group at the same level, which keeps
//!   the size constant. This is an upper bound on retiring.
//! * `insert`: `insert_group` + `insert_stream` + `ready` alone, on freed slab slots (as in the
//!   cycle above); the size grows by at most the plan length.
//! * `retire (direct)`, under callgrind only: `remove_stream` + `retire_group` counted alone,
//!   inside the function that makes the two calls (`--toggle-collect`), during the
//!   `retire+insert` run.
//! * `retire (derived)`: `retire+insert` minus `insert` at the same size: the same two calls by
//!   subtraction, as a check on the direct count.
//! * `*_own`: the MoQ session's pattern, every group at a priority of its own (`size` levels of
//!   one group). The place is the group's rank: the front is the highest priority (the one
//!   picked first), the tail the lowest. `set_priority_own` alternates the group between a
//!   priority no group has and its own, so every operation creates one level and drops one.
//!   `retire+insert_own` retires the group (dropping its level) and inserts a new one at the same
//!   priority (creating it again).
//!
//! Before counting, every plan is replayed natively and the scheduler's ring order checked
//! against the mirror, so a place named in the table is the place the operation hit.

#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::hint::black_box;

use std::process::ExitCode;

use bench::counter::{self, Meter, NoMeter, Source, parse_list};
use bench::report::Table;
use moq_quic::scheduler::{After, GroupId, Scheduler, StreamSlot};

/// The acceptance bar: instructions per reprioritize or retire, at every size and place.
const BAR: f64 = 250.0;

/// Ten 1,200-byte datagrams, a GSO batch; it does not enter the measured operations.
const QUANTUM: usize = 12_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
	SetPriority,
	RetireInsert,
	Insert,
	Loop,
	SetPriorityOwn,
	RetireInsertOwn,
}

impl Op {
	const ALL: [Self; 6] = [
		Self::SetPriority,
		Self::RetireInsert,
		Self::Insert,
		Self::Loop,
		Self::SetPriorityOwn,
		Self::RetireInsertOwn,
	];

	fn name(self) -> &'static str {
		match self {
			Self::SetPriority => "set_priority",
			Self::RetireInsert => "retire+insert",
			Self::Insert => "insert",
			Self::Loop => "loop",
			Self::SetPriorityOwn => "set_priority_own",
			Self::RetireInsertOwn => "retire+insert_own",
		}
	}

	fn parse(name: &str) -> Option<Self> {
		Self::ALL.into_iter().find(|op| op.name() == name)
	}

	/// Whether the operation hits a group at a place (front, middle, tail).
	fn placed(self) -> bool {
		!matches!(self, Self::Insert | Self::Loop)
	}

	/// Whether every group has a level of its own.
	fn own_levels(self) -> bool {
		matches!(self, Self::SetPriorityOwn | Self::RetireInsertOwn)
	}
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
	Front,
	Middle,
	Tail,
}

impl Place {
	const ALL: [Self; 3] = [Self::Front, Self::Middle, Self::Tail];

	fn name(self) -> &'static str {
		match self {
			Self::Front => "front",
			Self::Middle => "middle",
			Self::Tail => "tail",
		}
	}

	fn parse(name: &str) -> Option<Self> {
		Self::ALL.into_iter().find(|p| p.name() == name)
	}

	/// The index of this place in a ring of `len` groups, front first.
	fn index(self, len: usize) -> usize {
		match self {
			Self::Front => 0,
			Self::Middle => len / 2,
			Self::Tail => len - 1,
		}
	}
}

#[derive(Clone, Copy, Debug)]
struct Case {
	op: Op,
	size: usize,
	levels: usize,
	place: Option<Place>,
	/// Operations in the plan (the measured run replays all of them).
	plan: usize,
}

impl Case {
	fn child_args(&self) -> Vec<String> {
		let mut args = vec![
			"--child".to_owned(),
			self.op.name().to_owned(),
			"--sizes".to_owned(),
			self.size.to_string(),
			"--levels".to_owned(),
			self.levels.to_string(),
			"--ops".to_owned(),
			self.plan.to_string(),
		];
		if let Some(place) = self.place {
			args.extend(["--place".to_owned(), place.name().to_owned()]);
		}
		args
	}
}

/// The scheduler under test and a mirror of its rings: `rings[j]` is the ring of priority
/// `priorities[j]` (ascending), front first.
struct Setup {
	scheduler: Scheduler,
	rings: Vec<Vec<(GroupId, StreamSlot)>>,
	priorities: Vec<i32>,
}

/// `size` groups with a ready stream each, dealt round the levels; with `own`, one level each.
fn build(size: usize, levels: usize, own: bool) -> Setup {
	let levels = if own { size } else { levels };
	// Shared levels look like the session's subscriber priorities (`priority << 23`); own levels
	// are spaced by two, leaving a free priority next to each for set_priority_own.
	let priorities: Vec<i32> = (0..levels)
		.map(|j| if own { 2 * j as i32 } else { (j as i32) << 23 })
		.collect();
	let mut scheduler = Scheduler::with_capacity(QUANTUM, size, size);
	let mut rings = vec![Vec::new(); levels];
	for i in 0..size {
		let j = i % levels;
		let group = scheduler.insert_group(priorities[j]);
		let stream = scheduler.insert_stream(group, i as u64);
		scheduler.ready(stream);
		rings[j].push((group, stream));
	}
	Setup {
		scheduler,
		rings,
		priorities,
	}
}

/// The ring a plan operation works on, and the target's index in it.
fn target(setup: &Setup, case: &Case, i: usize) -> (usize, usize) {
	let place = case.place.expect("a placed operation");
	if case.op.own_levels() {
		// Rings are in ascending priority, so the front (served first) is the last ring.
		let ring = place.index(setup.rings.len());
		(setup.rings.len() - 1 - ring, 0)
	} else {
		let ring = i % setup.rings.len();
		(ring, place.index(setup.rings[ring].len()))
	}
}

/// `(group, new priority)` for each `set_priority`, worked out on the mirror, which ends in the
/// state the scheduler will be in after the replay.
fn set_priority_plan(setup: &mut Setup, case: &Case) -> Vec<(GroupId, i32)> {
	let mut plan = Vec::with_capacity(case.plan);
	for i in 0..case.plan {
		let (ring, at) = target(setup, case, i);
		if case.op.own_levels() {
			// Away to the free priority just above, then back.
			let group = setup.rings[ring][0].0;
			let priority = setup.priorities[ring] + if i % 2 == 0 { 1 } else { 0 };
			plan.push((group, priority));
		} else {
			let entry = setup.rings[ring].remove(at);
			let to = (ring + 1) % setup.rings.len();
			setup.rings[to].push(entry);
			plan.push((entry.0, setup.priorities[to]));
		}
	}
	plan
}

/// One retire-and-insert: the group and stream retired, and the priority of the new group.
#[derive(Clone, Copy)]
struct Retire {
	group: GroupId,
	stream: StreamSlot,
	priority: i32,
}

/// The retire plan, worked out on `setup` itself (the new groups' slots come from its slabs):
/// the replay must run on a second scheduler built the same way, which hands out the same slots.
/// Also returns the new handles, for the check.
fn retire_plan(setup: &mut Setup, case: &Case) -> (Vec<Retire>, Vec<(GroupId, StreamSlot)>) {
	let mut plan = Vec::with_capacity(case.plan);
	let mut inserted = Vec::with_capacity(case.plan);
	for i in 0..case.plan {
		let (ring, at) = target(setup, case, i);
		let (group, stream) = setup.rings[ring].remove(at);
		let priority = setup.priorities[ring];
		let s = &mut setup.scheduler;
		s.remove_stream(stream);
		s.retire_group(group);
		let new = s.insert_group(priority);
		let new_stream = s.insert_stream(new, i as u64);
		s.ready(new_stream);
		setup.rings[ring].push((new, new_stream));
		plan.push(Retire {
			group,
			stream,
			priority,
		});
		inserted.push((new, new_stream));
	}
	(plan, inserted)
}

/// Frees `count` group and stream slots beyond `setup`'s population, so inserts reuse slots as
/// they do after a retire.
fn free_slots(setup: &mut Setup, count: usize) {
	let s = &mut setup.scheduler;
	let extra: Vec<(GroupId, StreamSlot)> = (0..count)
		.map(|i| {
			let group = s.insert_group(setup.priorities[0]);
			(group, s.insert_stream(group, i as u64))
		})
		.collect();
	for (group, stream) in extra {
		s.remove_stream(stream);
		s.retire_group(group);
	}
}

fn insert_plan(setup: &Setup, case: &Case) -> Vec<i32> {
	(0..case.plan)
		.map(|i| setup.priorities[i % setup.priorities.len()])
		.collect()
}

#[inline(never)]
fn replay_set_priority(s: &mut Scheduler, plan: &[(GroupId, i32)]) {
	for &(group, priority) in plan {
		s.set_priority(group, priority);
	}
}

/// Retiring a group: its stream first, as the scheduler requires. Its own function so that
/// callgrind can count it alone ([`RETIRE_FN`]).
#[inline(never)]
fn retire_one(s: &mut Scheduler, op: &Retire) {
	s.remove_stream(op.stream);
	s.retire_group(op.group);
}

/// The symbol callgrind's `--toggle-collect` matches for [`retire_one`].
const RETIRE_FN: &str = "*scheduler::retire_one";

#[inline(never)]
fn insert_one(s: &mut Scheduler, priority: i32, key: u64) {
	let group = s.insert_group(priority);
	let stream = s.insert_stream(group, key);
	s.ready(stream);
}

#[inline(never)]
fn replay_retire(s: &mut Scheduler, plan: &[Retire]) {
	for (i, op) in plan.iter().enumerate() {
		retire_one(s, op);
		insert_one(s, op.priority, i as u64);
	}
}

#[inline(never)]
fn replay_insert(s: &mut Scheduler, plan: &[i32]) {
	for (i, &priority) in plan.iter().enumerate() {
		insert_one(s, priority, i as u64);
	}
}

/// The loop of [`replay_set_priority`] with the operation replaced by an opaque use.
#[inline(never)]
fn replay_loop(plan: &[(GroupId, i32)]) {
	for entry in plan {
		black_box(entry);
	}
}

/// Runs a case's first `cycles` plan operations between `meter.start()` and `meter.stop()`.
fn workload(case: &Case, cycles: u64, meter: &mut dyn Meter) {
	let cycles = (cycles as usize).min(case.plan);
	let own = case.op.own_levels();
	match case.op {
		Op::SetPriority | Op::SetPriorityOwn => {
			let mut setup = build(case.size, case.levels, own);
			let plan = set_priority_plan(&mut setup, case);
			meter.start();
			replay_set_priority(&mut setup.scheduler, &plan[..cycles]);
			meter.stop();
		}
		Op::RetireInsert | Op::RetireInsertOwn => {
			let mut planner = build(case.size, case.levels, own);
			let (plan, _) = retire_plan(&mut planner, case);
			let mut fresh = build(case.size, case.levels, own);
			meter.start();
			replay_retire(&mut fresh.scheduler, &plan[..cycles]);
			meter.stop();
		}
		Op::Insert => {
			let mut setup = build(case.size, case.levels, false);
			free_slots(&mut setup, case.plan);
			let plan = insert_plan(&setup, case);
			meter.start();
			replay_insert(&mut setup.scheduler, &plan[..cycles]);
			meter.stop();
		}
		Op::Loop => {
			let mut setup = build(case.size, case.levels, false);
			let plan = set_priority_plan(
				&mut setup,
				&Case {
					op: Op::SetPriority,
					place: Some(Place::Middle),
					..*case
				},
			);
			meter.start();
			replay_loop(&plan[..cycles]);
			meter.stop();
		}
	}
}

/// Every group, in the order picks serve them when each drains at once: rings by descending
/// priority, each from its front.
fn drain_order(s: &mut Scheduler) -> Vec<GroupId> {
	let mut order = Vec::new();
	while let Some(pick) = s.pick() {
		order.push(pick.group);
		s.sent(pick, 0, After::Drained);
	}
	order
}

fn mirror_order(setup: &Setup) -> Vec<GroupId> {
	setup.rings.iter().rev().flatten().map(|&(group, _)| group).collect()
}

/// Replays a case natively and checks that the scheduler's rings end as the mirror says, so
/// the plan hit the places it names.
fn verify(case: &Case) -> Result<(), String> {
	let own = case.op.own_levels();
	let (mut scheduler, expected) = match case.op {
		Op::SetPriority | Op::SetPriorityOwn => {
			let mut setup = build(case.size, case.levels, own);
			let plan = set_priority_plan(&mut setup, case);
			let mut fresh = build(case.size, case.levels, own).scheduler;
			replay_set_priority(&mut fresh, &plan);
			(fresh, mirror_order(&setup))
		}
		Op::RetireInsert | Op::RetireInsertOwn => {
			let mut planner = build(case.size, case.levels, own);
			let (plan, inserted) = retire_plan(&mut planner, case);
			let mut fresh = build(case.size, case.levels, own).scheduler;
			for (i, op) in plan.iter().enumerate() {
				// The replay's loop, with the handles checked against the plan's.
				fresh.remove_stream(op.stream);
				fresh.retire_group(op.group);
				let group = fresh.insert_group(op.priority);
				let stream = fresh.insert_stream(group, i as u64);
				fresh.ready(stream);
				if (group, stream) != inserted[i] {
					return Err(format!("replay {i} got other slots than the plan"));
				}
			}
			(fresh, mirror_order(&planner))
		}
		Op::Insert | Op::Loop => return Ok(()),
	};
	if scheduler.groups() != case.size {
		return Err(format!("{} groups after the replay", scheduler.groups()));
	}
	if drain_order(&mut scheduler) != expected {
		return Err("the scheduler's rings differ from the mirror".to_owned());
	}
	Ok(())
}

struct Args {
	sizes: Vec<usize>,
	levels: Vec<usize>,
	ops: usize,
	runs: Option<usize>,
	source: Option<Source>,
	save: bool,
	child: Option<(Op, Option<Place>)>,
	cycles: Option<u64>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
	let mut parsed = Args {
		sizes: vec![16, 256, 4096, 16384],
		levels: vec![2, 8],
		ops: 4096,
		runs: None,
		source: None,
		save: false,
		child: None,
		cycles: None,
	};
	let mut place = None;
	let mut child_op = None;
	while let Some(arg) = args.next() {
		let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
		match arg.as_str() {
			"--sizes" => {
				parsed.sizes = parse_list(&value("--sizes")?, "size")?;
			}
			"--levels" => {
				parsed.levels = parse_list(&value("--levels")?, "level count")?;
			}
			"--ops" => parsed.ops = value("--ops")?.parse().map_err(|e| format!("--ops: {e}"))?,
			"--runs" => parsed.runs = Some(value("--runs")?.parse().map_err(|e| format!("--runs: {e}"))?),
			"--cycles" => parsed.cycles = Some(value("--cycles")?.parse().map_err(|e| format!("--cycles: {e}"))?),
			"--source" => {
				parsed.source = Some(Source::parse(&value("--source")?)?);
			}
			"--save" => parsed.save = true,
			"--child" => {
				let name = value("--child")?;
				child_op = Some(Op::parse(&name).ok_or_else(|| format!("unknown operation {name:?}"))?);
			}
			"--place" => {
				let name = value("--place")?;
				place = Some(Place::parse(&name).ok_or_else(|| format!("unknown place {name:?}"))?);
			}
			other => return Err(format!("unknown argument {other:?}")),
		}
	}
	let (Some(&fewest), Some(&most)) = (parsed.levels.iter().min(), parsed.levels.iter().max()) else {
		return Err("--levels needs a value".to_owned());
	};
	if fewest < 2 {
		return Err("--levels must be at least 2 (set_priority moves between levels)".to_owned());
	}
	if let Some(&size) = parsed.sizes.iter().find(|&&size| size < most) {
		return Err(format!("size {size} is below --levels {most}"));
	}
	parsed.child = child_op.map(|op| (op, place));
	Ok(parsed)
}

/// One measured row.
struct Row {
	op: String,
	levels: usize,
	size: usize,
	place: &'static str,
	value: f64,
	runs: Vec<f64>,
	cycles: u64,
	source: Source,
}

fn unit(source: Source) -> String {
	format!("{}/op", source.unit())
}

fn measure(case: &Case, source: Source, runs: usize) -> Result<Row, String> {
	verify(case).map_err(|e| format!("{} at {} groups: {e}", case.op.name(), case.size))?;
	let child = case.child_args();
	let cycles = case.plan as u64;
	let mut values = Vec::new();
	for _ in 0..runs {
		let total = counter::count(source, cycles, &child, &mut |cycles, meter| {
			workload(case, cycles, meter)
		})
		.map_err(|e| format!("counting failed: {e}"))?;
		values.push(total / cycles as f64);
	}
	Ok(Row {
		op: case.op.name().to_owned(),
		levels: if case.op.own_levels() { case.size } else { case.levels },
		size: case.size,
		place: case.place.map_or("-", Place::name),
		value: counter::median(&mut values.clone()),
		runs: values,
		cycles,
		source,
	})
}

/// Under callgrind only: the instructions inside [`retire_one`] (with its call and return),
/// counted by `--toggle-collect` in one run of the `retire+insert` workload, per operation. A
/// second measurement of retiring that does not rest on subtracting the insert.
fn measure_direct(case: &Case) -> Result<Row, String> {
	let out = std::env::temp_dir().join(format!(
		"bench-scheduler-{}-{}-{}.out",
		std::process::id(),
		case.size,
		case.place.map_or("-", Place::name)
	));
	let exe = std::env::current_exe().map_err(|e| e.to_string())?;
	let status = std::process::Command::new("valgrind")
		.arg("--tool=callgrind")
		.arg(format!("--callgrind-out-file={}", out.display()))
		.arg(format!("--toggle-collect={RETIRE_FN}"))
		.arg("--quiet")
		.arg(&exe)
		.args(case.child_args())
		.args(["--cycles", &case.plan.to_string()])
		.env(counter::CHILD_ENV, "1")
		.status()
		.map_err(|e| format!("valgrind: {e}"))?;
	if !status.success() {
		return Err(format!("callgrind run failed: {status}"));
	}
	let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
	let _ = std::fs::remove_file(&out);
	let total = counter::parse_callgrind_total(&text).ok_or("no totals in the callgrind output")?;
	let value = total as f64 / case.plan as f64;
	Ok(Row {
		op: "retire (direct)".to_owned(),
		levels: case.levels,
		size: case.size,
		place: case.place.map_or("-", Place::name),
		value,
		runs: vec![value],
		cycles: case.plan as u64,
		source: Source::Callgrind,
	})
}

/// A case's rows: its count and, for `retire+insert` under callgrind, the direct retire count.
fn measure_case(case: &Case, source: Source, runs: usize) -> Result<Vec<Row>, String> {
	let mut rows = vec![measure(case, source, runs)?];
	if case.op == Op::RetireInsert && source == Source::Callgrind {
		rows.push(measure_direct(case)?);
	}
	Ok(rows)
}

fn print_row(row: &Row) {
	println!(
		"{:<18} {:>6} {:>6} {:<7} {:>8.1} {} ({})",
		row.op,
		row.levels,
		row.size,
		row.place,
		row.value,
		unit(row.source),
		row.source.name()
	);
}

/// `retire (derived)` rows: each `retire+insert` minus `insert` at the same size and levels.
fn derived(rows: &[Row]) -> Vec<Row> {
	rows.iter()
		.filter(|r| r.op == Op::RetireInsert.name())
		.filter_map(|r| {
			let insert = rows
				.iter()
				.find(|i| i.op == Op::Insert.name() && i.size == r.size && i.levels == r.levels)?;
			Some(Row {
				op: "retire (derived)".to_owned(),
				levels: r.levels,
				size: r.size,
				place: r.place,
				value: r.value - insert.value,
				runs: Vec::new(),
				cycles: r.cycles,
				source: r.source,
			})
		})
		.collect()
}

/// The smallest and largest value among rows of `op`, and how many rows there are.
fn range(rows: &[Row], op: &str) -> Option<(f64, f64, usize)> {
	rows.iter()
		.filter(|r| r.op == op)
		.map(|r| (r.value, r.value, 1))
		.reduce(|a, b| (a.0.min(b.0), a.1.max(b.1), a.2 + b.2))
}

fn verdict(rows: &[Row]) -> String {
	let mut out = String::new();
	let judged = [
		"set_priority",
		"retire (direct)",
		"retire (derived)",
		"set_priority_own",
		"retire+insert_own",
	];
	let others = ["retire+insert", "insert"];
	for op in judged.into_iter().chain(others) {
		if let Some((min, max, count)) = range(rows, op) {
			let mark = match (judged.contains(&op), max <= BAR) {
				(false, _) => "not judged by the bar",
				(true, true) => "within the bar",
				(true, false) => "OVER the bar",
			};
			let _ = writeln!(
				out,
				"- `{op}`: {min:.1} to {max:.1} {} over {count} rows ({mark})",
				unit(rows[0].source)
			);
		}
	}
	out
}

/// The results table: every row, with what each operation counts and the bar's verdict.
fn table(rows: &[Row]) -> Table {
	let source = rows.first().map_or(Source::Callgrind, |row| row.source);
	let notes = format!(
		"Median of the run(s) per row (callgrind counts are exact and repeat to the instruction); \
		 each run replays `cycles` operations.\n\n\
		 Bar: at most {BAR} instructions per reprioritize or retire at every size from 16 to 16,384 \
		 groups, front, middle and tail; and in the session's pattern (a level per group, `*_own`), \
		 at most {BAR} per reprioritize and per retire+insert, the same at every size. What each operation counts is in the harness's docs \
		 (`bench/src/bin/scheduler.rs`); in short:\n\n\
		 - `set_priority`: one group at the place moves to the tail of another existing level.\n\
		 - `retire+insert`: `remove_stream` + `retire_group` of the group at the place, then \
		 `insert_group` + `insert_stream` + `ready` of a new one at the same level (size kept).\n\
		 - `insert`: `insert_group` + `insert_stream` + `ready` alone, on freed slots.\n\
		 - `retire (direct)`: `remove_stream` + `retire_group` alone, counted inside the function that \
		 makes the two calls (callgrind `--toggle-collect`, call and return included) during the \
		 `retire+insert` run.\n\
		 - `retire (derived)`: `retire+insert` minus `insert` (same size): `remove_stream` + \
		 `retire_group` again, by subtraction; it agrees with the direct count to within the loop.\n\
		 - `loop`: the replay loop with the operation replaced by `black_box`; every row includes it.\n\
		 - `*_own`: every group at a priority of its own (the MoQ session's pattern), place = rank \
		 (front = highest priority); each operation creates a level and drops one.\n\n\
		 Groups are spread evenly over the levels, so a ring holds `groups / levels` groups: up to \
		 8,192 with 2 levels.\n\n## Summary\n\n{}\n## All rows",
		verdict(rows)
	);
	Table {
		name: "scheduler".into(),
		title: "Send scheduler: reprioritizing and retiring a group".into(),
		unit: unit(source),
		source: source.describe().into(),
		notes,
		columns: ["operation", "levels", "groups", "place", "value", "runs", "cycles"]
			.map(String::from)
			.to_vec(),
		rows: rows
			.iter()
			.map(|r| {
				let runs: Vec<String> = r.runs.iter().map(|v| format!("{v:.1}")).collect();
				vec![
					r.op.clone(),
					r.levels.to_string(),
					r.size.to_string(),
					r.place.to_owned(),
					format!("{:.1}", r.value),
					if runs.is_empty() { "-".into() } else { runs.join(", ") },
					r.cycles.to_string(),
				]
			})
			.collect(),
		after: String::new(),
	}
}

fn main() -> ExitCode {
	let args = match parse(std::env::args().skip(1)) {
		Ok(args) => args,
		Err(e) => {
			eprintln!("scheduler: {e}");
			return ExitCode::FAILURE;
		}
	};
	if let Some((op, place)) = args.child {
		// A callgrind child: run the one workload it was given, unmeasured.
		if counter::is_child() {
			for &size in &args.sizes {
				let case = Case {
					op,
					size,
					levels: args.levels[0],
					place,
					plan: args.ops,
				};
				workload(&case, args.cycles.unwrap_or(0), &mut NoMeter);
			}
			return ExitCode::SUCCESS;
		}
		eprintln!("scheduler: --child is for callgrind runs");
		return ExitCode::FAILURE;
	}
	let source = args.source.unwrap_or_else(counter::detect);
	let runs = args.runs.unwrap_or(if source == Source::Callgrind { 1 } else { 5 });
	eprintln!("source: {}", source.describe());
	println!(
		"{:<18} {:>6} {:>6} {:<7} {:>8}",
		"operation", "levels", "groups", "place", "count/op"
	);
	let mut rows = Vec::new();
	let mut cases = Vec::new();
	for &size in &args.sizes {
		for &levels in &args.levels {
			for op in Op::ALL.into_iter().filter(|op| !op.own_levels()) {
				cases.push((op, size, levels));
			}
		}
		for op in Op::ALL.into_iter().filter(|op| op.own_levels()) {
			cases.push((op, size, size));
		}
	}
	for (op, size, levels) in cases {
		let places: Vec<Option<Place>> = if op.placed() {
			Place::ALL.into_iter().map(Some).collect()
		} else {
			vec![None]
		};
		for place in places {
			let case = Case {
				op,
				size,
				levels,
				place,
				plan: args.ops,
			};
			match measure_case(&case, source, runs) {
				Ok(measured) => {
					for row in measured {
						print_row(&row);
						rows.push(row);
					}
				}
				Err(e) => {
					eprintln!("scheduler: {e}");
					return ExitCode::FAILURE;
				}
			}
		}
	}
	let derived = derived(&rows);
	for row in &derived {
		print_row(row);
	}
	rows.extend(derived);
	print!("{}", verdict(&rows));
	if args.save
		&& let Err(e) = table(&rows).save()
	{
		eprintln!("scheduler: cannot save results: {e}");
		return ExitCode::FAILURE;
	}
	ExitCode::SUCCESS
}
