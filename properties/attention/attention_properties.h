// Properties of op "paged_attention", checked bitwise on generated batches.
//
// A case (CaseSpec, op = "paged_attention") encodes everything:
//   dtype                 q / pool dtype (float16, bfloat16; float32 on the CPU)
//   shape                 {H_q, H_kv, D, page_size}
//   seed                  data seed
//   params  q=5.1.1       per-sequence query lengths ('.'-joined)
//           kv=17.40.9    per-sequence cached lengths (new tokens included), q <= kv
//           target=0      the sequence under test
//           place=N       page placement seed (0: the allocator's order; else a seeded shuffle of the pool)
//           pool=E        free pages beyond those the batch needs (default 0)
//           place2=M      block_placement: placement seed of the second run
//           share=P       block_placement: every sequence i > 0 starts with the same tokens as
//                         sequence 0 for min(P, kv_0 / page_size, kv_i / page_size) full pages; the
//                         first run stores copies, the second points the block tables at sequence 0's
//                         pages (as a prefix cache shares a system prompt)
//           chunks=3.4.1  chunked_prefill: chunk sizes of the target's query rows (sum = its q)
//           alpha=0x...   softmax scale as hex bits of a double (default 0: 1/sqrt(D))
//
// Data: element e of logical tensor t is a pure function of (seed, t, e) (splitmix64, a sum of
// four uniforms: normal-ish, never zero). For sequence u: t = 3u (q), 3u+1 (K), 3u+2 (V), and e
// indexes the per-sequence tensor [position in the sequence, head, d]: a token has the same values
// wherever its page lives and whatever batch it is in.
//
// Properties (all bitwise except accuracy):
//   seq_alone_vs_batched  the target's rows alone == its rows inside the batch (1..64 others,
//                         mixed prefill, prefill chunks and decodes)
//   block_placement       the whole output is the same for two placements of the pages, the second
//                         also sharing prefix pages between sequences
//   chunked_prefill       the target's query rows computed in chunks (each chunk a step of its
//                         own, with the batch around it) == the same rows in one go
//   decode_vs_prefill     a decode step (q=1 over the target's kv tokens) == the last row of the
//                         target's prefill over the same tokens
//   repeat                two runs give the same bits (on CUDA the second on another stream)
//   accuracy              within a per-dtype tolerance of the float64 reference
//                         (paged_attention_reference_f64): |out - ref| <= 2 eps (|ref| + 1) with
//                         eps = 2^-7 (bfloat16), 2^-10 (float16), 2^-20 (float32); the absolute
//                         part covers P rounded to the input dtype before P@V (data is of order one).
//                         Invariance is bitwise, so a bug that moves float32 bits shows in a
//                         bfloat16 output only when it crosses a rounding boundary (or through
//                         the rounded P): float32 cases are the sharpest detector on the CPU.
// Fully masked rows: with the bottom-right mask and q_len <= kv_len (enforced) no row is fully
// masked. kv_len = 0 is legal only with q_len = 0 (a sequence with no rows); the generators never
// make one.
#pragma once

#include "properties/case.h"
#include "properties/verdict.h"

#include <rapidcheck.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace detfuzz {

std::vector<std::string> attention_properties();

rc::Gen<CaseSpec> gen_attention_case(const std::string &impl, const std::string &property, Backend backend,
                                     at::ScalarType dtype);

// Builds the cache and metadata the case describes, runs the impl and checks the property.
// Throws std::invalid_argument on a malformed case or an unknown impl; an impl that throws gives
// Verdict::error.
Verdict check_attention_case(const CaseSpec &c);

namespace attention_case {

std::string join(const std::vector<int64_t> &v);  // "5.1.1"

// The data generator: normal-ish, never zero.
float value(uint64_t seed, uint64_t tensor, uint64_t index);
float keyed_value(uint64_t key,
                  uint64_t index);  // value(seed, tensor, i) with key = counter_data::tensor_key(seed, tensor)

struct Seq {
  int64_t uid = 0, q_len = 1, kv_len = 1;
  int64_t share_pages = 0;  // leading full pages whose tokens are sequence 0's
};

struct Geometry {
  int64_t h_q = 1, h_kv = 1, head_dim = 64, page_size = 16;
};

struct Batch {
  OpArgs args;                     // the six tensors, on the case's backend
  std::vector<int64_t> row_begin;  // first output row of each sequence (size S+1)
  int64_t num_blocks = 0;
};

Geometry geometry(const CaseSpec &c);           // throws std::invalid_argument
std::vector<Seq> sequences(const CaseSpec &c);  // from q=, kv= (uid = index); throws std::invalid_argument

// The q, K and V rows of a case's sequences, in the case's dtype and on its device, made on first
// use and shared by every build of one check (a property builds its batches two or more times
// from the same sequences). Row `pos` of sequence uid's tensor `which` (0 q, 1 K, 2 V) holds
// elements pos * width .. of logical tensor 3 uid + which, as the data note above says.
class SequenceRows {
 public:
  explicit SequenceRows(const CaseSpec &c);
  // Rows [from, to) as a [to - from, width] tensor (a view of what was made).
  at::Tensor rows(int64_t uid, int which, int64_t from, int64_t to);

 private:
  struct Made {
    int64_t from = 0, to = 0;
    at::Tensor rows;
  };
  uint64_t seed_;
  int64_t width_[3];
  at::ScalarType dtype_;
  at::Device device_;
  std::map<std::pair<int64_t, int>, Made> made_;
};

// Writes every sequence's tokens into a fresh pool through KVCache::set_kv and builds q and the
// metadata. Pages come from a BlockAllocator, shuffled by place_seed (0: allocator order); with
// share_physical, sequence i's first share_pages pages are sequence 0's pages. The rows come from
// `rows` when given (the check's shared SequenceRows), else are made for this batch alone.
Batch build(const CaseSpec &c, const std::vector<Seq> &seqs, int64_t place_seed, int64_t extra_pages,
            bool share_physical, SequenceRows *rows = nullptr);

}  // namespace attention_case
}  // namespace detfuzz
