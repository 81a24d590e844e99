// Interruption of a long run (a campaign) by SIGINT or SIGTERM, what a user's Ctrl-C and a CI
// timeout send. The handler only records the signal; the campaign polls interrupt_signal() between
// cases (and between shrink steps), abandons the rest of its budget, and the caller writes a
// finished report marked "interrupted": true and exits 128 + the signal (130, 143).
#pragma once

namespace detfuzz {

// Installs the handlers for SIGINT and SIGTERM (idempotent). A second signal of the same kind
// while the first is being handled ends the process at once with the default action.
void install_interrupt_handlers();
// The signal received since install_interrupt_handlers(), or 0.
int interrupt_signal();

}  // namespace detfuzz
