//! The Setup uni stream: its type, then SETUP (parameters, caps, duplicates).
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::lite::{DataType, Setup};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	check::<Setup>(data);
	if let Some((_, used)) = check::<DataType>(data)
		&& let Some((setup, _)) = check::<Setup>(&data[used..])
	{
		// The typed accessors never panic on what decoded.
		let _ = (setup.probe(), setup.path(), setup.role(), setup.cost(), setup.origin());
	}
});
