// Property of op "laps_engine": schedule_invariance (seed 001, Features 2 and 3). Where and when
// a request runs must never change its output bits.
//
// A case runs one generated trace through the engine (ops/engine) twice:
//   baseline  every request alone: FIFO, one instance, one sequence at a time, whole prompts,
//             no prefix reuse, pages of 16;
//   variant   a generated schedule: FIFO or LAPS with a threshold, 1..4 instances, the router's
//             dynamic groups on or off with a threshold, rebalance interval and ratio, a prefill
//             token budget (prompts chunked), a running-sequence cap, a page size, a small page
//             pool (prefix pages evicted), prefix reuse on or off, arrival times permuted within a
//             window, and aborts of other requests.
// Every request that is not aborted must produce the same token ids and the same final
// log-probability bits in both runs (the harness's bitwise diff).
//
// Case encoding (CaseSpec, op = "laps_engine", property = "schedule_invariance"):
//   dtype, shape          the model's (shape: the model's geometry, see ops/engine/model.h)
//   seed                  weights and token ids (counter-based generator)
//   params len=12.40.7    prompt lengths, one per request ('.'-joined)
//          dec=2.0.1      greedy decode steps per request
//          at=0.3.3       arrival times in milliseconds
//          sys=0.1.0      system prompt opening each request (0: none; k: shared prompt k)
//          syslen=16      tokens of a system prompt (a prompt shorter than that is all system prompt)
//          policy=laps thr=32                  the variant's queue policy and threshold
//          inst=3 glaps=1 rthr=32 ivl=5 ratio=0x3ff8000000000000   instances, router groups on/off,
//                                              router threshold, rebalance interval (ms), ratio (hex double)
//          budget=64 run=4 page=16 pool=0 reuse=1   prefill tokens per step, running cap, page size,
//                                              pages per instance beyond the largest request (0: enough for all)
//          win=10 perm=123                     arrival permutation window (ms) and seed (win=0: none)
//          abort=2.5 abort_ms=1.4              requests aborted in the variant, ms after their arrival
//          wl=1.1000.16.256.4096.50.4          a generated workload instead of len/dec/at/sys (ops/engine/
//                                              workload.h: seed, requests, min, short max, max length,
//                                              rate per second, decode steps; 30% open with a 64-token
//                                              system prompt)
//          base=fifo                           compare with FIFO on the variant's instances, budget,
//                                              pages and reuse (router groups off) instead of alone
//          clock=measured                      steps last their measured wall time (default: the cost model)
// Token id of request i at position p: counter_bits(seed, 2 i + 1, p) % vocab; of system prompt k:
// counter_bits(seed, 2 k, p) % vocab.
//
// The generator draws requests as a RapidCheck container, so a failure shrinks to the fewest
// requests, the shortest prompts and the simplest schedule that still differ.
#pragma once

#include "ops/engine/engine.h"
#include "ops/engine/workload.h"
#include "properties/case.h"
#include "properties/generators.h"
#include "properties/verdict.h"

#include <rapidcheck.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace detfuzz {

std::vector<std::string> laps_properties();  // {"schedule_invariance"}
rc::Gen<CaseSpec> gen_laps_case(const Target &t);
// Throws std::invalid_argument on a malformed case or an unknown impl; an engine or model that
// throws gives Verdict::error.
Verdict check_laps_case(const CaseSpec &c);

namespace laps_case {

using ModelFactory = std::function<std::unique_ptr<engine::StepModel>(const CaseSpec &)>;

engine::Trace trace(const CaseSpec &c, int64_t vocab);                      // the baseline trace
engine::Trace variant_trace(const CaseSpec &c, const engine::Trace &base);  // permuted arrivals, aborts
engine::EngineConfig baseline_config();
engine::EngineConfig variant_config(const CaseSpec &c);
engine::EngineConfig fifo_of(const engine::EngineConfig &variant);  // base=fifo
engine::WorkloadConfig workload(const CaseSpec &c, int64_t vocab);  // from wl=

// Both runs of a case and their verdict.
struct Comparison {
  Verdict verdict;
  engine::Trace base_trace, variant_trace;
  engine::EngineConfig base_config, variant_config;
  engine::EngineResult base, variant;
  int64_t compared = 0, token_changes = 0, bit_changes = 0;  // requests
};
Comparison compare(const CaseSpec &c, engine::StepModel &model);
// The property with the model from `make_model` (the registry's for check_laps_case; tests
// pass test doubles).
Verdict check(const CaseSpec &c, const ModelFactory &make_model);
// The generator with explicit limits (max requests, max prompt length).
rc::Gen<CaseSpec> gen(const Target &t, std::vector<int64_t> shape, int64_t max_requests, int64_t max_len);

}  // namespace laps_case
}  // namespace detfuzz
