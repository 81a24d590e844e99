#include "harness/signals.h"

#include <csignal>

namespace detfuzz {
namespace {

volatile std::sig_atomic_t received = 0;

void on_signal(int sig) {
  if (received != 0) {  // a second interrupt: stop waiting for the run to wind down
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  received = sig;
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int interrupt_signal() { return received; }

}  // namespace detfuzz
