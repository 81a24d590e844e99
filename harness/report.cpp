#include "harness/report.h"

#include "harness/remove_tree.h"

#include <ATen/Parallel.h>
#include <torch/version.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#ifdef DETFUZZ_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace detfuzz {
namespace fs = std::filesystem;
namespace {

const char *kCasesHeader =
    "case,source,op,impl,property,backend,dtype,shape,layout,dist,seed,params,expectation,outcome,differing,numel,max_"
    "ulp,"
    "max_abs_diff,elapsed_us";

std::string command_output(const std::string &cmd) {
  std::string out;
  if (FILE *p = popen(cmd.c_str(), "r")) {
    std::array<char, 256> buf{};
    while (fgets(buf.data(), buf.size(), p)) out += buf.data();
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string cpu_model() {
  return command_output("grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'");
}

}  // namespace

ReportWriter::ReportWriter(fs::path out, bool with_cases) : out_(std::move(out)) {
  std::error_code ec;
  if (fs::exists(out_, ec) && !(fs::is_directory(out_, ec) && fs::is_empty(out_, ec)))
    throw ReportError("output folder " + out_.string() + " exists and is not empty");
  const fs::path parent = out_.has_parent_path() ? out_.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  partial_ = parent / (out_.filename().string() + ".partial-" + std::to_string(getpid()));
  if (ec || !fs::create_directory(partial_, ec) || ec)
    throw ReportError("cannot write the output folder " + out_.string() + (ec ? ": " + ec.message() : ""));
  if (!with_cases) return;
  cases_.open(partial_ / "cases.csv");
  failures_.open(partial_ / "failures.csv");
  if (!cases_ || !failures_) throw ReportError("cannot write files in " + partial_.string());
  cases_ << kCasesHeader << '\n';
  failures_ << record_header() << '\n';
}

ReportWriter::~ReportWriter() {
  if (finished_) return;
  if (cases_.is_open()) cases_.close();
  if (failures_.is_open()) failures_.close();
  remove_tree(partial_.string());
}

void ReportWriter::add_case(const CaseRow &row) {
  const Record &r = row.record;
  const CaseSpec &c = r.spec;
  char seed[24], abs_diff[40], us[32];
  std::snprintf(seed, sizeof seed, "0x%llx", static_cast<unsigned long long>(c.seed));
  std::snprintf(abs_diff, sizeof abs_diff, "%.9g", r.diff.max_abs_diff);
  std::snprintf(us, sizeof us, "%.1f", row.elapsed_us);
  const std::string ulp = r.diff.max_ulp == UINT64_MAX ? "inf" : std::to_string(r.diff.max_ulp);
  cases_ << row.index << ',' << row.source << ',' << c.op << ',' << c.impl << ',' << c.property << ','
         << to_string(c.backend) << ',' << dtype_name(c.dtype) << ',' << c.shape_string() << ',' << csv_field(c.layout)
         << ',' << c.dist << ',' << seed << ',' << csv_field(c.params_string()) << ',' << to_string(row.expectation)
         << ',' << r.outcome << ',' << r.diff.differing << ',' << r.diff.numel << ',' << ulp << ',' << abs_diff << ','
         << us << '\n';
}

void ReportWriter::add_failure(const Record &r) { failures_ << record_row(r) << '\n' << std::flush; }

void ReportWriter::add_file(const std::string &name, const std::string &content) {
  extra_files_.emplace_back(name, content);
}

void ReportWriter::finish(const nlohmann::json &summary) {
  for (const auto &[name, content] : extra_files_) {
    std::ofstream f(partial_ / name);
    f << content;
    if (!f) throw ReportError("cannot write " + (partial_ / name).string());
  }
  std::ofstream s(partial_ / "summary.json");
  s << summary.dump(2) << '\n';
  if (cases_.is_open()) cases_.close();
  if (failures_.is_open()) failures_.close();
  s.close();
  if (!s || cases_.fail() || failures_.fail()) throw ReportError("cannot finish the report in " + partial_.string());
  std::error_code ec;
  if (fs::exists(out_, ec)) fs::remove(out_, ec);  // only ever an empty folder (checked at start)
  fs::rename(partial_, out_, ec);
  if (ec) throw ReportError("cannot move the report into " + out_.string() + ": " + ec.message());
  finished_ = true;
}

GitState git_state_of(const fs::path &source_dir) {
  GitState g;
  std::error_code ec;
  const fs::path src = fs::weakly_canonical(source_dir, ec);
  if (ec) return g;
  const std::string quoted = "'" + src.string() + "'";
  // Only when the source tree is itself the top of a work tree: an enclosing repository (a
  // tarball unpacked inside someone's home repository) says nothing about these sources.
  const std::string top = command_output("git -C " + quoted + " rev-parse --show-toplevel 2>/dev/null");
  if (top.empty() || fs::weakly_canonical(top, ec) != src || ec) return g;
  const std::string commit = command_output("git -C " + quoted + " rev-parse --verify --quiet HEAD 2>/dev/null");
  if (commit.empty()) return g;
  g.commit = commit;
  g.dirty = !command_output("git -C " + quoted + " status --porcelain --untracked-files=no 2>/dev/null").empty();
  return g;
}

nlohmann::json run_context() {
  nlohmann::json ctx;
  ctx["libtorch"] = TORCH_VERSION;
  ctx["cpu"] = cpu_model();
  ctx["cpu_threads"] = at::get_num_threads();
  ctx["hostname"] = command_output("hostname");
  const GitState git = git_state_of(DETFUZZ_SOURCE_DIR);
  ctx["git_commit"] = git.commit;
  ctx["git_dirty"] = git.dirty;
  nlohmann::json env = nlohmann::json::object();
  for (const char *name : {"CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "TORCH_BLAS_PREFER_CUBLASLT",
                           "NVIDIA_TF32_OVERRIDE", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS",
                           "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA"})
    env[name] = std::getenv(name) ? nlohmann::json(std::getenv(name)) : nlohmann::json(nullptr);
  ctx["env"] = env;
  ctx["device"] = "cpu";
#ifdef DETFUZZ_WITH_CUDA
  int runtime = 0, driver = 0, count = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  ctx["cuda_runtime"] = runtime;
  ctx["cuda_driver_api"] = driver;
  ctx["cublas"] = static_cast<int64_t>(cublasGetCudartVersion());
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    ctx["device"] = prop.name;
    ctx["sm_count"] = prop.multiProcessorCount;
    ctx["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
    ctx["l2_bytes"] = prop.l2CacheSize;
    ctx["driver"] = command_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1");
    size_t ver = 0;
    cublasHandle_t h;
    if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
      int v = 0;
      cublasGetVersion(h, &v);
      ver = static_cast<size_t>(v);
      cublasDestroy(h);
    }
    ctx["cublas"] = ver;
  } else {
    cudaGetLastError();  // clear the "no device" error
  }
#endif
  return ctx;
}

fs::path default_report_dir(const std::string &kind, uint64_t seed) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
  return fs::path(DETFUZZ_SOURCE_DIR) / "reports" / (std::string(stamp) + "-" + kind + "-seed" + std::to_string(seed));
}

}  // namespace detfuzz
