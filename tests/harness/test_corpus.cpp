#include "harness/corpus.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace detfuzz {
namespace {

namespace fs = std::filesystem;

Record sample() {
  Record r;
  r.spec.op = "addmm";
  r.spec.impl = "torch";
  r.spec.property = "batch_slice";
  r.spec.backend = Backend::cpu;
  r.spec.dtype = at::kBFloat16;
  r.spec.shape = {17, 3, 65};
  r.spec.layout = "ctp";
  r.spec.dist = "special";
  r.spec.seed = 0xdeadbeefcafeull;
  r.spec.params = {{"alpha", double_to_hex(0.75)}, {"bias", "2"}, {"i", "3"}, {"j", "9"}};
  r.outcome = "fail";
  r.diff.dtype = at::kBFloat16;
  r.diff.differing = 4;
  r.diff.numel = 18;
  r.diff.first_coords = "[0,1]";
  r.diff.expected_bits = 0x3f80;
  r.diff.actual_bits = 0x3f81;
  r.diff.max_abs_diff = 0.0078125;
  r.diff.max_ulp = 3;
  r.detail = "op(x[3:9]) vs op(x)[3:9]: 4/18 elements differ, \"quoted\"";
  return r;
}

TEST(Corpus, RecordRoundTripsThroughOneCsvLine) {
  const Record r = sample();
  const std::string line = record_row(r);
  const Record back = parse_record_line(line);
  EXPECT_EQ(back.spec.describe(), r.spec.describe());
  EXPECT_EQ(back.outcome, "fail");
  EXPECT_TRUE(same_diff(back.diff, r.diff));
  EXPECT_EQ(back.diff.max_ulp, 3u);
  EXPECT_EQ(back.detail, r.detail);
  EXPECT_EQ(back.spec.param_double("alpha", 0), 0.75);
  EXPECT_EQ(record_row(back), line);
}

TEST(Corpus, FloatAttributesAndValuesAreStoredAsHex) {
  const std::string line = record_row(sample());
  EXPECT_NE(line.find("alpha=0x3fe8000000000000"), std::string::npos);
  EXPECT_NE(line.find(",0x3f80,0x3f81,"), std::string::npos);
  EXPECT_NE(line.find(",0xdeadbeefcafe,"), std::string::npos);
}

TEST(Corpus, ReadsAFileWithHeader) {
  const fs::path p = fs::temp_directory_path() / "detfuzz_test_corpus.csv";
  {
    std::ofstream f(p);
    f << record_header() << "\n" << record_row(sample()) << "\n" << record_row(sample()) << "\n";
  }
  const auto records = read_records(p);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].spec.shape, (std::vector<int64_t>{17, 3, 65}));
  EXPECT_EQ(record_files(p).size(), 1u);
  fs::remove(p);
}

void expect_corpus_error(const std::string &content, const std::string &needle) {
  const fs::path p = fs::temp_directory_path() / "detfuzz_test_bad.csv";
  {
    std::ofstream f(p);
    f << content;
  }
  try {
    read_records(p);
    ADD_FAILURE() << "no error for: " << content;
  } catch (const CorpusError &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "error must be one line: " << what;
  }
  fs::remove(p);
}

TEST(Corpus, MalformedRecordsAreOneLineErrorsNamingTheLine) {
  std::string good = record_row(sample());
  auto with = [&](const std::string &from, const std::string &to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return record_header() + "\n" + good + "\n" + s + "\n";
  };
  expect_corpus_error(with(",bfloat16,", ",bfloat17,"), ":3: malformed record: unknown dtype 'bfloat17'");
  expect_corpus_error(with(",17x3x65,", ",17x3xq,"), "shape '17x3xq'");
  expect_corpus_error(with(",0xdeadbeefcafe,", ",12345,"), "seed '12345'");
  expect_corpus_error(with(",cpu,", ",tpu,"), "unknown backend 'tpu'");
  expect_corpus_error(with(",fail,", ",maybe,"), "outcome 'maybe'");
  expect_corpus_error("op,impl\nmm,torch\n", "malformed record file");
  expect_corpus_error(record_header() + "\nmm,torch,batch_slice\n", "malformed record file");
}

TEST(Corpus, MissingPathIsAnError) {
  EXPECT_THROW(record_files("/nonexistent/detfuzz"), CorpusError);
  EXPECT_THROW(read_records("/nonexistent/detfuzz.csv"), CorpusError);
}

TEST(Corpus, ReproCommandQuotesForTheShell) {
  Record r = sample();
  r.detail = "it's quoted";
  const std::string cmd = repro_command(r, "build/detfuzz");
  EXPECT_EQ(cmd.rfind("build/detfuzz replay --case '", 0), 0u);
  EXPECT_NE(cmd.find("it'\\''s"), std::string::npos);
}

}  // namespace
}  // namespace detfuzz
