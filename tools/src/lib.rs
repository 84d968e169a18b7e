//! What ships in `revenant` beside the product, behind the `tools` feature: the benches
//! (`revenant bench …`, docs/BENCHMARKS.md) and the demo traffic (`revenant demo`). Both use
//! the engine's public API only, like any other client of it.

pub mod bench;
pub mod demo;
