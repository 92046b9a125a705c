// Internal to src/io: the outputs in flight (AtomicFile temporaries, StagingDir directories), so
// that a fatal signal handler can remove them before the process ends.
#pragma once

namespace flashnorm::io::detail {

// Unlinks every registered temporary file, then every registered staging directory (with the
// files inside it). Async-signal-safe: callable from a signal handler.
void remove_registered_outputs() noexcept;

}  // namespace flashnorm::io::detail
