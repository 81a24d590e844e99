// Op specs: the parser, the check against the dispatcher's schema, the registry with the built-in
// aten specs, and the loader of users' kernel libraries. The format is documented in op_spec.h.
#include "properties/spec/op_spec.h"
#include "ops/first_line.h"

#include "ops/registry.h"
#include "properties/case.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

namespace detfuzz {
namespace {

[[noreturn]] void fail_at(const std::string &origin, int line, const std::string &msg) {
  throw std::invalid_argument(origin + ":" + std::to_string(line) + ": " + msg);
}

bool is_identifier(const std::string &s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
}

bool parse_int(const std::string &s, int64_t &out) {
  if (s.empty()) return false;
  char *end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}

// Removes comments and the spaces inside [...] groups; then splits on whitespace.
std::vector<std::string> tokens_of(const std::string &raw) {
  std::string line = raw.substr(0, raw.find('#'));
  std::string squeezed;
  int depth = 0;
  for (char ch : line) {
    if (ch == '[') ++depth;
    if (ch == ']') depth = std::max(0, depth - 1);
    if (depth > 0 && std::isspace(static_cast<unsigned char>(ch))) continue;
    squeezed += ch;
  }
  std::vector<std::string> out;
  std::stringstream ss(squeezed);
  std::string tok;
  while (ss >> tok) out.push_back(tok);
  return out;
}

// "[M,K]" -> {"M","K"}; "[]" -> {}.
std::vector<std::string> bracket_list(const std::string &tok, const std::string &origin, int line,
                                      const std::string &what) {
  if (tok.size() < 2 || tok.front() != '[' || tok.back() != ']')
    fail_at(origin, line, what + " '" + tok + "' is not a bracketed list like [M,K]");
  std::vector<std::string> items;
  const std::string inner = tok.substr(1, tok.size() - 2);
  if (inner.empty()) return items;
  std::stringstream ss(inner);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) fail_at(origin, line, what + " '" + tok + "' has an empty entry");
    items.push_back(item);
  }
  if (inner.back() == ',') fail_at(origin, line, what + " '" + tok + "' has an empty entry");
  return items;
}

std::vector<std::string> split_alternatives(const std::string &tok) {
  std::vector<std::string> alts;
  std::stringstream ss(tok);
  std::string a;
  while (std::getline(ss, a, '|')) alts.push_back(a);
  if (!tok.empty() && tok.back() == '|') alts.push_back("");
  return alts;
}

SpecArg::Kind kind_from(const std::string &s, const std::string &origin, int line) {
  if (s == "tensor") return SpecArg::Kind::tensor;
  if (s == "int") return SpecArg::Kind::int_value;
  if (s == "float") return SpecArg::Kind::float_value;
  if (s == "bool") return SpecArg::Kind::bool_value;
  if (s == "int[]") return SpecArg::Kind::int_list;
  if (s == "dtype") return SpecArg::Kind::dtype;
  if (s == "none") return SpecArg::Kind::none;
  fail_at(origin, line, "unknown argument kind '" + s + "' (expected tensor, int, float, bool, int[], dtype or none)");
}

[[noreturn]] void bad_value(const std::string &origin, int line, const std::string &arg, const std::string &v,
                            const std::string &expected) {
  fail_at(origin, line, "argument '" + arg + "': value '" + v + "' is not " + expected);
}

// One value of a value argument in the case-param encoding.
std::string encode_value(SpecArg::Kind kind, const std::string &v, const std::string &origin, int line,
                         const std::string &arg) {
  if (v == "none" && kind != SpecArg::Kind::bool_value) return "none";
  switch (kind) {
    case SpecArg::Kind::int_value: {
      int64_t x;
      if (!parse_int(v, x)) bad_value(origin, line, arg, v, "an integer");
      return std::to_string(x);
    }
    case SpecArg::Kind::float_value: {
      char *end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') bad_value(origin, line, arg, v, "a number");
      return double_to_hex(x);
    }
    case SpecArg::Kind::bool_value:
      if (v == "true" || v == "1") return "1";
      if (v == "false" || v == "0") return "0";
      bad_value(origin, line, arg, v, "true or false");
    case SpecArg::Kind::int_list: {
      if (v.size() < 2 || v.front() != '[' || v.back() != ']')
        bad_value(origin, line, arg, v, "a list like [1,2], [] or none");
      const auto items = bracket_list(v, origin, line, "argument '" + arg + "' value");
      if (items.empty()) return "empty";
      std::string out;
      for (const auto &item : items) {
        int64_t x;
        if (!parse_int(item, x)) bad_value(origin, line, arg, v, "a list of integers");
        out += (out.empty() ? "" : ".") + std::to_string(x);
      }
      return out;
    }
    case SpecArg::Kind::dtype: try { return dtype_name(dtype_from_string(v));
      } catch (const std::invalid_argument &) {
        bad_value(origin, line, arg, v, "a dtype (float32, float16, bfloat16, float64, int32, int64) or none");
      }
    default: bad_value(origin, line, arg, v, "a value");
  }
  return "";
}

void parse_arg(OpSpec &spec, const std::vector<std::string> &t, const std::string &origin, int line) {
  if (t.size() < 3) fail_at(origin, line, "'arg' needs a name and a kind: arg <name> <kind> ...");
  SpecArg a;
  a.name = t[1];
  a.line = line;
  if (!is_identifier(a.name)) fail_at(origin, line, "argument name '" + a.name + "' is not an identifier");
  for (const auto &other : spec.args)
    if (other.name == a.name) fail_at(origin, line, "argument '" + a.name + "' is declared twice");
  a.kind = kind_from(t[2], origin, line);
  if (a.kind == SpecArg::Kind::tensor) {
    if (t.size() < 4) fail_at(origin, line, "tensor argument '" + a.name + "' needs its sizes, e.g. [M,K]");
    a.dims = bracket_list(t[3], origin, line, "sizes of '" + a.name + "'");
    for (const auto &d : a.dims) {
      int64_t v;
      if (!is_identifier(d) && !(parse_int(d, v) && v >= 0))
        fail_at(origin, line,
                "size '" + d + "' of '" + a.name + "' is neither a size variable nor a non-negative integer");
    }
    for (size_t k = 4; k < t.size(); ++k) {
      const std::string &opt = t[k];
      int64_t v;
      if (opt.rfind("batch=", 0) == 0) {
        if (!parse_int(opt.substr(6), v) || v < 0 || v >= static_cast<int64_t>(a.dims.size()))
          fail_at(origin, line,
                  "'" + opt + "' of '" + a.name + "' is not a dim of its " + std::to_string(a.dims.size()) + " dims");
        a.batch = static_cast<int>(v);
      } else if (opt.rfind("dtype=", 0) == 0) {
        try {
          a.dtype = dtype_from_string(opt.substr(6));
        } catch (const std::invalid_argument &e) {
          fail_at(origin, line, e.what());
        }
      } else {
        fail_at(origin, line, "unknown tensor option '" + opt + "' (expected batch=<dim> or dtype=<dtype>)");
      }
    }
  } else if (a.kind == SpecArg::Kind::none) {
    if (t.size() != 3) fail_at(origin, line, "argument '" + a.name + "' of kind none takes no values");
    a.values = {"none"};
  } else {
    if (t.size() != 4)
      fail_at(origin, line,
              "argument '" + a.name + "' needs exactly one value list like 1|2 (no spaces), got " +
                  std::to_string(t.size() - 3) + " tokens");
    for (const auto &v : split_alternatives(t[3])) a.values.push_back(encode_value(a.kind, v, origin, line, a.name));
  }
  spec.args.push_back(std::move(a));
}

void parse_out(OpSpec &spec, const std::vector<std::string> &t, const std::string &origin, int line) {
  if (spec.out_batch >= 0 || spec.out_shape_given) fail_at(origin, line, "a second 'out' line");
  for (size_t k = 1; k < t.size(); ++k) {
    int64_t v;
    if (t[k].front() == '[') {
      spec.out_dims = bracket_list(t[k], origin, line, "out sizes");
      spec.out_shape_given = true;
    } else if (t[k].rfind("batch=", 0) == 0) {
      if (!parse_int(t[k].substr(6), v) || v < 0) fail_at(origin, line, "'" + t[k] + "' is not batch=<dim>");
      spec.out_batch = static_cast<int>(v);
    } else {
      fail_at(origin, line, "unknown 'out' token '" + t[k] + "' (expected [sizes] and batch=<dim>)");
    }
  }
  if (spec.out_shape_given && spec.out_batch >= static_cast<int>(spec.out_dims.size()))
    fail_at(origin, line,
            "out batch=" + std::to_string(spec.out_batch) + " is not a dim of its " +
                std::to_string(spec.out_dims.size()) + " dims");
}

void parse_sizes(OpSpec &spec, const std::vector<std::string> &t, const std::string &origin, int line) {
  for (size_t k = 1; k < t.size(); ++k) {
    const auto eq = t[k].find('=');
    if (eq == std::string::npos) fail_at(origin, line, "size '" + t[k] + "' is not <V>=<lo>..<hi> or <V>=<n>");
    SizeVar v;
    v.line = line;
    v.name = t[k].substr(0, eq);
    if (!is_identifier(v.name)) fail_at(origin, line, "size variable '" + v.name + "' is not an identifier");
    if (spec.size_index(v.name) >= 0) fail_at(origin, line, "size variable '" + v.name + "' is declared twice");
    const std::string range = t[k].substr(eq + 1);
    const auto dots = range.find("..");
    bool ok;
    if (dots == std::string::npos) {
      ok = parse_int(range, v.lo);
      v.hi = v.lo;
    } else {
      ok = parse_int(range.substr(0, dots), v.lo) && parse_int(range.substr(dots + 2), v.hi);
    }
    if (!ok || v.lo < 0 || v.hi < v.lo)
      fail_at(origin, line, "size '" + t[k] + "' needs 0 <= lo <= hi (as <V>=<lo>..<hi> or <V>=<n>)");
    spec.sizes.push_back(v);
  }
  if (t.size() < 2) fail_at(origin, line, "'sizes' lists no size variables");
}

void finish_block(OpSpec &spec) {
  const std::string &origin = spec.origin;
  const int line = spec.line;
  const std::string who = "op " + spec.name + ": ";
  if (spec.tensor_count() == 0) fail_at(origin, line, who + "has no tensor argument");
  if (spec.dtypes.empty()) fail_at(origin, line, who + "has no 'dtypes' line");
  std::set<std::string> used;
  auto check_dims = [&](const std::vector<std::string> &dims, int at, const std::string &what) {
    for (const auto &d : dims) {
      if (!is_identifier(d)) continue;
      if (spec.size_index(d) < 0)
        fail_at(origin, at, who + what + " uses size variable '" + d + "', which 'sizes' does not declare");
      used.insert(d);
    }
  };
  std::string batch_var;
  for (const auto &a : spec.args) {
    if (a.kind != SpecArg::Kind::tensor) continue;
    check_dims(a.dims, a.line, "argument '" + a.name + "'");
    if (a.batch < 0) continue;
    const std::string &v = a.dims[a.batch];
    if (!is_identifier(v))
      fail_at(origin, a.line,
              who + "the batch dim of '" + a.name + "' is the fixed size " + v + ", not a size variable");
    if (!batch_var.empty() && v != batch_var)
      fail_at(origin, a.line,
              who + "batch dims disagree: '" + a.name + "' has " + v + " where others have " + batch_var);
    batch_var = v;
  }
  check_dims(spec.out_dims, line, "out");
  for (const auto &v : spec.sizes)
    if (!used.count(v.name))
      fail_at(origin, v.line, who + "size variable '" + v.name + "' is declared but no tensor uses it");
  if (batch_var.empty() && spec.out_batch >= 0)
    fail_at(origin, line, who + "out has batch= but no argument marks a batch dim");
  if (!batch_var.empty() && spec.out_batch < 0)
    fail_at(origin, line, who + "arguments mark a batch dim but 'out' has no batch=");
  if (!batch_var.empty() && spec.out_shape_given && spec.out_dims[spec.out_batch] != batch_var)
    fail_at(origin, line,
            who + "out batch dim is " + spec.out_dims[spec.out_batch] + " but the arguments' batch is " + batch_var);
}

std::string op_name_of(const std::string &name, std::string &overload) {
  const auto sep = name.find("::");
  const auto dot = name.find('.', sep == std::string::npos ? 0 : sep);
  overload = dot == std::string::npos ? "" : name.substr(dot + 1);
  return name.substr(0, dot);
}

bool valid_op_name(const std::string &name) {
  const auto sep = name.find("::");
  if (sep == std::string::npos) return false;
  std::string overload;
  const std::string base = op_name_of(name, overload);
  if (!is_identifier(base.substr(0, sep)) || !is_identifier(base.substr(sep + 2))) return false;
  return overload.empty() ? name.find('.') == std::string::npos : is_identifier(overload);
}

// ---- schema check ----

bool matches_kind(const SpecArg &a, const c10::Argument &s, std::string &why) {
  c10::TypePtr t = s.real_type();
  bool optional = false;
  if (auto o = t->cast<c10::OptionalType>()) {
    optional = true;
    t = o->getElementType();
  }
  const bool wants_none = std::find(a.values.begin(), a.values.end(), "none") != a.values.end();
  if (wants_none && !optional) {
    why = "None is given but the schema's type is not optional";
    return false;
  }
  const auto k = t->kind();
  switch (a.kind) {
    case SpecArg::Kind::tensor: return k == c10::TypeKind::TensorType;
    case SpecArg::Kind::int_value: return k == c10::TypeKind::IntType || k == c10::TypeKind::SymIntType;
    case SpecArg::Kind::float_value: return k == c10::TypeKind::FloatType || k == c10::TypeKind::NumberType;
    case SpecArg::Kind::bool_value: return k == c10::TypeKind::BoolType;
    case SpecArg::Kind::int_list: {
      auto l = t->cast<c10::ListType>();
      if (!l) return false;
      const auto ek = l->getElementType()->kind();
      return ek == c10::TypeKind::IntType || ek == c10::TypeKind::SymIntType;
    }
    case SpecArg::Kind::dtype: return k == c10::TypeKind::ScalarTypeType;
    case SpecArg::Kind::none: return optional;
  }
  return false;
}

// ---- registry ----

struct SpecRegistry {
  std::mutex mu;
  std::list<OpSpec> owned;  // never shrinks: pointers stay valid
  std::vector<std::string> order;
  std::map<std::string, const OpSpec *> by_name;
  bool builtins_loaded = false;
};

SpecRegistry &registry() {
  static SpecRegistry *r = new SpecRegistry;
  return *r;
}

void add_locked(SpecRegistry &r, OpSpec spec) {
  r.owned.push_back(std::move(spec));
  const OpSpec *p = &r.owned.back();
  if (!r.by_name.count(p->name)) r.order.push_back(p->name);
  r.by_name[p->name] = p;
}

void load_builtins_locked(SpecRegistry &r) {
  if (r.builtins_loaded) return;
  r.builtins_loaded = true;
  for (OpSpec &s : parse_op_specs(builtin_op_specs_text(), "<builtin>")) {
    s.builtin = true;
    try {
      validate_op_spec(s);
    } catch (const std::invalid_argument &e) {
      throw std::logic_error(std::string("built-in op spec does not match libtorch: ") + e.what());
    }
    add_locked(r, std::move(s));
  }
}

}  // namespace

int OpSpec::tensor_count() const {
  return static_cast<int>(
      std::count_if(args.begin(), args.end(), [](const SpecArg &a) { return a.kind == SpecArg::Kind::tensor; }));
}

int OpSpec::size_index(const std::string &var) const {
  for (size_t k = 0; k < sizes.size(); ++k)
    if (sizes[k].name == var) return static_cast<int>(k);
  return -1;
}

int OpSpec::batch_size_index() const {
  for (const auto &a : args)
    if (a.kind == SpecArg::Kind::tensor && a.batch >= 0) return size_index(a.dims[a.batch]);
  return -1;
}

const char *to_string(SpecArg::Kind k) {
  switch (k) {
    case SpecArg::Kind::tensor: return "tensor";
    case SpecArg::Kind::int_value: return "int";
    case SpecArg::Kind::float_value: return "float";
    case SpecArg::Kind::bool_value: return "bool";
    case SpecArg::Kind::int_list: return "int[]";
    case SpecArg::Kind::dtype: return "dtype";
    case SpecArg::Kind::none: return "none";
  }
  return "?";
}

std::string spec_param_key(const std::string &arg_name) {
  static const std::set<std::string> reserved = {"i", "j", "o", "tail", "perm"};
  return reserved.count(arg_name) ? "arg." + arg_name : arg_name;
}

std::vector<OpSpec> parse_op_specs(const std::string &text, const std::string &origin) {
  std::vector<OpSpec> specs;
  std::stringstream in(text);
  std::string raw;
  int line = 0;
  OpSpec *cur = nullptr;
  bool saw_dtypes = false;
  while (std::getline(in, raw)) {
    ++line;
    const auto t = tokens_of(raw);
    if (t.empty()) continue;
    const std::string &d = t[0];
    if (d == "op") {
      if (t.size() != 2) fail_at(origin, line, "'op' needs exactly one operator name, e.g. op myns::my_mm");
      if (!valid_op_name(t[1]))
        fail_at(origin, line, "operator name '" + t[1] + "' is not <namespace>::<name>[.<overload>]");
      for (const auto &s : specs)
        if (s.name == t[1]) fail_at(origin, line, "op " + t[1] + " is specified twice");
      if (cur) finish_block(*cur);
      specs.emplace_back();
      cur = &specs.back();
      cur->name = t[1];
      cur->op_name = op_name_of(t[1], cur->overload);
      cur->origin = origin;
      cur->line = line;
      saw_dtypes = false;
      continue;
    }
    if (!cur) fail_at(origin, line, "'" + d + "' before any 'op' line");
    if (d == "arg") {
      parse_arg(*cur, t, origin, line);
    } else if (d == "out") {
      parse_out(*cur, t, origin, line);
    } else if (d == "sizes") {
      parse_sizes(*cur, t, origin, line);
    } else if (d == "dtypes") {
      if (saw_dtypes) fail_at(origin, line, "a second 'dtypes' line");
      saw_dtypes = true;
      if (t.size() < 2) fail_at(origin, line, "'dtypes' lists no dtypes");
      for (size_t k = 1; k < t.size(); ++k) {
        try {
          cur->dtypes.push_back(dtype_from_string(t[k]));
        } catch (const std::invalid_argument &e) {
          fail_at(origin, line, e.what());
        }
      }
    } else {
      fail_at(origin, line, "unknown directive '" + d + "' (expected op, arg, out, sizes or dtypes)");
    }
  }
  if (!cur) fail_at(origin, line == 0 ? 1 : line, "no 'op' line: the spec is empty");
  finish_block(*cur);
  return specs;
}

OpSpec parse_op_spec(const std::string &text, const std::string &origin) {
  auto specs = parse_op_specs(text, origin);
  if (specs.size() != 1)
    fail_at(origin, specs[1].line,
            "expected one op spec, found " + std::to_string(specs.size()) + " (use parse_op_specs)");
  return std::move(specs.front());
}

void validate_op_spec(const OpSpec &spec) {
  const auto handle = c10::Dispatcher::singleton().findSchema({spec.op_name, spec.overload});
  if (!handle)
    fail_at(spec.origin, spec.line,
            "operator " + spec.name +
                " is not registered with libtorch's dispatcher (load the library that defines it first)");
  const c10::FunctionSchema &schema = handle->schema();
  std::stringstream sig;
  sig << schema;
  const std::string in_schema = " (schema: " + sig.str() + ")";
  const auto &sargs = schema.arguments();
  if (spec.args.size() > sargs.size())
    fail_at(spec.origin, spec.line,
            spec.name + " takes " + std::to_string(sargs.size()) + " arguments, the spec gives " +
                std::to_string(spec.args.size()) + in_schema);
  for (size_t k = 0; k < sargs.size(); ++k) {
    if (k >= spec.args.size()) {
      if (!sargs[k].default_value())
        fail_at(
            spec.origin, spec.line,
            spec.name + ": the spec leaves out argument '" + sargs[k].name() + "', which has no default" + in_schema);
      continue;
    }
    const SpecArg &a = spec.args[k];
    if (a.name != sargs[k].name())
      fail_at(spec.origin, a.line,
              spec.name + ": argument " + std::to_string(k + 1) + " is '" + sargs[k].name() +
                  "' in the schema, the spec says '" + a.name + "'" + in_schema);
    std::string why;
    if (!matches_kind(a, sargs[k], why))
      fail_at(spec.origin, a.line,
              spec.name + ": argument '" + a.name + "' is " + sargs[k].real_type()->str() +
                  " in the schema, the spec says " + to_string(a.kind) + (why.empty() ? "" : ": " + why) + in_schema);
  }
  const auto &rets = schema.returns();
  if (rets.size() != 1 || rets[0].type()->kind() != c10::TypeKind::TensorType)
    fail_at(spec.origin, spec.line, spec.name + " must return exactly one Tensor to be fuzzed" + in_schema);
}

void load_kernel_library(const std::string &path) {
  // Loading the same path again is harmless (dlopen counts references; initialisers run once). A
  // library whose static initialiser throws — e.g. a second copy, under another path, of a library
  // whose TORCH_LIBRARY namespace is already registered — cannot be reported here: the exception
  // cannot cross dlopen, and the process ends with c10's message (as torch.ops.load_library does).
  dlerror();
  void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    const char *err = dlerror();
    throw std::invalid_argument("cannot load kernel library '" + path +
                                "': " + first_line(err ? err : "unknown dlopen error"));
  }
}

void register_op_spec(OpSpec spec) {
  validate_op_spec(spec);
  SpecRegistry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  load_builtins_locked(r);
  add_locked(r, std::move(spec));
}

std::vector<std::string> load_op_spec_file(const std::string &path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot read op spec file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::string> names;
  auto specs = parse_op_specs(ss.str(), path);
  for (const auto &s : specs) validate_op_spec(s);  // all or nothing
  for (auto &s : specs) {
    names.push_back(s.name);
    register_op_spec(std::move(s));
  }
  return names;
}

const OpSpec *find_op_spec(const std::string &op) {
  SpecRegistry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  load_builtins_locked(r);
  const auto it = r.by_name.find(op);
  return it == r.by_name.end() ? nullptr : it->second;
}

std::vector<std::string> spec_ops() {
  SpecRegistry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  load_builtins_locked(r);
  return r.order;
}

const std::string &builtin_op_specs_text() {
  // Size variables of the matmul family follow the row ops' shape order (mm: M N K; bmm: B M N K).
  static const std::string text = R"(# Built-in specs: the aten ops of batch-invariant mode.
op     aten::mm
arg    self tensor [M, K] batch=0
arg    mat2 tensor [K, N]
out    [M, N] batch=0
sizes  M=1..256 N=0..256 K=0..512
dtypes float32 float16 bfloat16

op     aten::addmm
arg    self tensor [N]
arg    mat1 tensor [M, K] batch=0
arg    mat2 tensor [K, N]
arg    beta float 1|0.5|0
arg    alpha float 1|0.75|-1.5
out    [M, N] batch=0
sizes  M=1..256 N=0..256 K=0..512
dtypes float32 float16 bfloat16

op     aten::bmm
arg    self tensor [B, M, K] batch=1
arg    mat2 tensor [B, K, N]
out    [B, M, N] batch=1
sizes  B=1..6 M=1..128 N=0..128 K=0..256
dtypes float32 float16 bfloat16

op     aten::baddbmm
arg    self tensor [B, M, N] batch=1
arg    batch1 tensor [B, M, K] batch=1
arg    batch2 tensor [B, K, N]
arg    beta float 1|0.5|0
arg    alpha float 1|0.75
out    [B, M, N] batch=1
sizes  B=1..6 M=1..128 N=0..128 K=0..256
dtypes float32 float16 bfloat16

op     aten::_log_softmax
arg    self tensor [M, N] batch=0
arg    dim int 1|-1
arg    half_to_float bool false
out    [M, N] batch=0
sizes  M=1..256 N=1..512
dtypes float32 float16 bfloat16

op     aten::mean.dim
arg    self tensor [M, R, N] batch=0
arg    dim int[] [2]|[1,2]|[-1]
arg    keepdim bool false|true
arg    dtype none
out    batch=0
sizes  M=1..256 R=1..8 N=1..512
dtypes float32 float16 bfloat16
)";
  return text;
}

}  // namespace detfuzz
