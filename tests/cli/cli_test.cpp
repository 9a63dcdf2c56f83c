// The heed tool, run as a separate process on .npy files these tests write, compared with the
// float64 oracle.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/reference/oracle.hpp"
#include "heed/dtype.hpp"
#include "json.hpp"
#include "npy.hpp"

namespace heed {
namespace {

namespace fs = std::filesystem;

// Relative plus absolute tolerance of the tool's output against the oracle, per compute dtype.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return 1e-4;
    case DType::Float16:
      return 2e-3;
    case DType::BFloat16:
      return 1.6e-2;
    case DType::Bool:
    case DType::Int32:
      break;
  }
  return 0.0;
}

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;
  std::string err;
};

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// A fresh directory per test, removed afterwards.
class HeedTool : public ::testing::Test {
 public:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() / ("heed_cli_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  CommandResult heed(const std::vector<std::string>& args) const {
    std::string command = shell_quote(HEED_CLI_PATH);
    for (const std::string& arg : args) command += " " + shell_quote(arg);
    command += " >" + shell_quote(path("stdout.txt")) + " 2>" + shell_quote(path("stderr.txt"));
    const int status = std::system(command.c_str());
    CommandResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = read_text(path("stdout.txt"));
    result.err = read_text(path("stderr.txt"));
    return result;
  }

  // Files other than the captured stdout/stderr: a failed run must leave none behind.
  std::vector<std::string> leftover_files() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name != "stdout.txt" && name != "stderr.txt" && name.find("input") != 0)
        names.push_back(name);
    }
    return names;
  }

  fs::path dir_;
};

// q, k, v as float32 values (already representable in the dtype they are written as).
struct Problem {
  std::vector<std::int64_t> q_shape, k_shape, v_shape;
  std::vector<float> q, k, v;
};

std::vector<float> random_values(std::size_t count, std::mt19937& generator) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(generator);
  return values;
}

std::size_t numel(const std::vector<std::int64_t>& shape) {
  std::size_t count = 1;
  for (const std::int64_t dim : shape) count *= static_cast<std::size_t>(dim);
  return count;
}

Problem make_problem(std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads,
                     std::int64_t q_len, std::int64_t kv_len, std::int64_t head_dim,
                     std::int64_t value_dim, unsigned seed) {
  std::mt19937 generator(seed);
  Problem problem;
  problem.q_shape = {batch, q_heads, q_len, head_dim};
  problem.k_shape = {batch, kv_heads, kv_len, head_dim};
  problem.v_shape = {batch, kv_heads, kv_len, value_dim};
  problem.q = random_values(numel(problem.q_shape), generator);
  problem.k = random_values(numel(problem.k_shape), generator);
  problem.v = random_values(numel(problem.v_shape), generator);
  return problem;
}

std::vector<std::uint16_t> to_bits(const std::vector<float>& values, DType dtype) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    bits[i] =
        dtype == DType::Float16 ? float_to_half_bits(values[i]) : float_to_bfloat16_bits(values[i]);
  }
  return bits;
}

// The values as the dtype stores them (float16/bfloat16 rounding applied).
std::vector<float> rounded(const std::vector<float>& values, DType dtype) {
  if (dtype == DType::Float32) return values;
  std::vector<float> result;
  for (const std::uint16_t bits : to_bits(values, dtype)) {
    result.push_back(dtype == DType::Float16 ? half_bits_to_float(bits)
                                             : bfloat16_bits_to_float(bits));
  }
  return result;
}

void write_array(const std::string& path, const std::vector<std::int64_t>& shape,
                 const std::vector<float>& values, npy::ElementType type,
                 bool fortran_order = false) {
  npy::WriteOptions options;
  options.fortran_order = fortran_order;
  if (type == npy::ElementType::Float16) {
    npy::write(path, npy::from_float16_bits(shape, to_bits(values, DType::Float16)), options);
  } else {
    npy::write(path, npy::from_float32(shape, values), options);
  }
}

// The oracle on the inputs rounded to `dtype`, with scale and options as given.
std::vector<double> oracle(const Problem& problem, DType dtype, double scale,
                           const AttentionOptions& options) {
  std::vector<float> q = rounded(problem.q, dtype), k = rounded(problem.k, dtype),
                     v = rounded(problem.v, dtype);
  const TensorView q_view(q.data(), DType::Float32, Shape(problem.q_shape));
  const TensorView k_view(k.data(), DType::Float32, Shape(problem.k_shape));
  const TensorView v_view(v.data(), DType::Float32, Shape(problem.v_shape));
  return reference::attention(q_view, k_view, v_view, scale, options);
}

// Reads the tool's output and checks it against `expected` within the dtype's tolerance.
void expect_output_matches(const std::string& out_path, const std::vector<std::int64_t>& out_shape,
                           const std::vector<double>& expected, DType dtype) {
  const npy::Array out = npy::read(out_path);
  ASSERT_EQ(out.type, npy::ElementType::Float32);
  ASSERT_EQ(out.shape, out_shape);
  const std::vector<float> got = npy::to_float32(out);
  ASSERT_EQ(got.size(), expected.size());
  const double tol = tolerance(dtype);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << "NaN at " << i;
    const double error = std::fabs(static_cast<double>(got[i]) - expected[i]);
    ASSERT_LE(error, tol * (1.0 + std::fabs(expected[i])))
        << "element " << i << ": " << got[i] << " vs " << expected[i];
  }
}

void write_problem(const HeedTool& test, const Problem& problem, npy::ElementType type,
                   bool q_fortran = false) {
  write_array(test.path("input_q.npy"), problem.q_shape, problem.q, type, q_fortran);
  write_array(test.path("input_k.npy"), problem.k_shape, problem.k, type);
  write_array(test.path("input_v.npy"), problem.v_shape, problem.v, type);
}

std::vector<std::string> run_args(const HeedTool& test, std::vector<std::string> extra) {
  std::vector<std::string> args = {"run",
                                   "--q",
                                   test.path("input_q.npy"),
                                   "--k",
                                   test.path("input_k.npy"),
                                   "--v",
                                   test.path("input_v.npy"),
                                   "--out",
                                   test.path("out.npy")};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::int64_t> out_shape_of(const Problem& problem) {
  return {problem.q_shape[0], problem.q_shape[1], problem.q_shape[2], problem.v_shape[3]};
}

double default_scale(const Problem& problem) {
  return 1.0 / std::sqrt(static_cast<double>(problem.q_shape[3]));
}

void expect_clean_failure(const HeedTool& test, const CommandResult& result, int exit_code) {
  EXPECT_EQ(result.exit_code, exit_code) << result.err;
  const bool prefixed = result.err.rfind("[heed", 0) == 0 || result.err.rfind("heed:", 0) == 0;
  EXPECT_TRUE(prefixed) << "stderr: " << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << "stderr: " << result.err;
  EXPECT_FALSE(fs::exists(test.path("out.npy")));
  EXPECT_TRUE(test.leftover_files().empty()) << test.leftover_files().front();
}

TEST_F(HeedTool, RunFloat32MatchesOracle) {
  const Problem problem = make_problem(2, 4, 2, 7, 9, 16, 8, 1);
  write_problem(*this, problem, npy::ElementType::Float32);
  const CommandResult result = heed(run_args(*this, {}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  expect_output_matches(path("out.npy"), out_shape_of(problem),
                        oracle(problem, DType::Float32, default_scale(problem), {}),
                        DType::Float32);
  EXPECT_EQ(leftover_files(), std::vector<std::string>{"out.npy"});
}

TEST_F(HeedTool, RunFloat16InputComputesInFloat16) {
  const Problem problem = make_problem(1, 6, 3, 17, 17, 32, 32, 2);
  write_problem(*this, problem, npy::ElementType::Float16);
  const CommandResult result = heed(run_args(*this, {"--causal"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  AttentionOptions options;
  options.causal = true;
  expect_output_matches(path("out.npy"), out_shape_of(problem),
                        oracle(problem, DType::Float16, default_scale(problem), options),
                        DType::Float16);
}

TEST_F(HeedTool, RunBFloat16FromFloat32Files) {
  const Problem problem = make_problem(2, 2, 1, 5, 33, 64, 16, 3);
  write_problem(*this, problem, npy::ElementType::Float32);
  const CommandResult result = heed(run_args(*this, {"--dtype", "bf16", "--scale", "0.2"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  expect_output_matches(path("out.npy"), out_shape_of(problem),
                        oracle(problem, DType::BFloat16, 0.2, {}), DType::BFloat16);
}

TEST_F(HeedTool, RunReadsFortranOrderInput) {
  const Problem problem = make_problem(2, 3, 3, 7, 7, 8, 8, 4);
  write_problem(*this, problem, npy::ElementType::Float32, /*q_fortran=*/true);
  const CommandResult result = heed(run_args(*this, {}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  expect_output_matches(path("out.npy"), out_shape_of(problem),
                        oracle(problem, DType::Float32, default_scale(problem), {}),
                        DType::Float32);
}

TEST_F(HeedTool, RunWithBoolMaskCausalAndSinks) {
  const Problem problem = make_problem(2, 4, 2, 7, 9, 16, 16, 5);
  write_problem(*this, problem, npy::ElementType::Float32);
  std::vector<std::uint8_t> mask(7 * 9);
  for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 7 + 3) % 5 != 0;
  for (std::size_t j = 0; j < 9; ++j) mask[4 * 9 + j] = 0;  // row 4 fully masked: zeros
  npy::write(path("input_mask.npy"), npy::from_bools({7, 9}, mask));
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  write_array(path("input_sinks.npy"), {4}, sinks, npy::ElementType::Float32);
  const CommandResult result = heed(run_args(
      *this, {"--mask", path("input_mask.npy"), "--sinks", path("input_sinks.npy"), "--causal"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;

  AttentionOptions options;
  options.causal = true;
  options.mask = TensorView(mask.data(), DType::Bool, Shape{7, 9});
  std::vector<float> sink_values = sinks;
  options.sinks = TensorView(sink_values.data(), DType::Float32, Shape{4});
  const std::vector<double> expected =
      oracle(problem, DType::Float32, default_scale(problem), options);
  expect_output_matches(path("out.npy"), out_shape_of(problem), expected, DType::Float32);
  const std::vector<float> got = npy::to_float32(npy::read(path("out.npy")));
  for (std::size_t d = 0; d < 16; ++d) EXPECT_EQ(got[4 * 16 + d], 0.0f);  // b 0, head 0, row 4
}

TEST_F(HeedTool, RunWithAdditiveMaskWindowAndComposedRoute) {
  const Problem problem = make_problem(1, 4, 4, 6, 11, 16, 24, 6);
  write_problem(*this, problem, npy::ElementType::Float32);
  std::mt19937 generator(7);
  std::vector<float> additive = random_values(6 * 11, generator);
  write_array(path("input_mask.npy"), {1, 1, 6, 11}, additive, npy::ElementType::Float32);
  AttentionOptions options;
  options.causal = true;
  options.window = 4;
  options.mask = TensorView(additive.data(), DType::Float32, Shape{1, 1, 6, 11});
  const std::vector<double> expected =
      oracle(problem, DType::Float32, default_scale(problem), options);
  for (const char* route : {"auto", "composed"}) {
    const CommandResult result = heed(run_args(
        *this, {"--mask", path("input_mask.npy"), "--causal", "--window", "4", "--route", route}));
    ASSERT_EQ(result.exit_code, 0) << route << ": " << result.err;
    expect_output_matches(path("out.npy"), out_shape_of(problem), expected, DType::Float32);
  }
}

TEST_F(HeedTool, RunWithSoftcapMatchesOracle) {
  const Problem problem = make_problem(1, 4, 2, 7, 19, 16, 16, 10);
  write_problem(*this, problem, npy::ElementType::Float32);
  AttentionOptions options;
  options.causal = true;
  options.softcap = 0.5f;  // small against these scores, so the cap shapes every weight
  const std::vector<double> expected = oracle(problem, DType::Float32, default_scale(problem), options);
  for (const char* route : {"auto", "tiled", "composed"}) {
    const CommandResult result = heed(run_args(*this, {"--causal", "--softcap", "0.5", "--route", route}));
    ASSERT_EQ(result.exit_code, 0) << route << ": " << result.err;
    expect_output_matches(path("out.npy"), out_shape_of(problem), expected, DType::Float32);
  }
  const CommandResult plan = heed({"plan", "--q", "1,4,7,16", "--k", "1,2,19,16", "--v", "1,2,19,16", "--softcap", "0.5"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("softcap 0.5"), std::string::npos) << plan.out;
  const CommandResult bad = heed({"plan", "--q", "1,4,7,16", "--k", "1,2,19,16", "--v", "1,2,19,16", "--softcap", "-2"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("softcap"), std::string::npos) << bad.err;
}

// heed explain shows a long-key plan's scratch with and without a budget; a budget nothing
// meets names the smallest that fits.
TEST_F(HeedTool, ExplainShowsTheScratchWithAndWithoutABudget) {
  const std::vector<std::string> shape = {"--q", "1,8,256,64", "--k", "1,2,65536,64", "--v", "1,2,65536,64",
                                          "--dtype", "f32", "--route", "tiled"};
  std::vector<std::string> args = {"explain"};
  args.insert(args.end(), shape.begin(), shape.end());
  const CommandResult unbounded = heed(args);
  ASSERT_EQ(unbounded.exit_code, 0) << unbounded.err;
  args.insert(args.end(), {"--max-scratch-bytes", "600000"});
  const CommandResult bounded = heed(args);
  ASSERT_EQ(bounded.exit_code, 0) << bounded.err;
  EXPECT_NE(bounded.out.find("max_scratch_bytes 600000"), std::string::npos) << bounded.out;
  if (unbounded.out.find("1 of") == std::string::npos) {  // more than one worker: fewer fit the budget
    EXPECT_NE(bounded.out.find("scratch bound by max_scratch_bytes 600000"), std::string::npos) << bounded.out;
    EXPECT_NE(bounded.out.find("without it"), std::string::npos) << bounded.out;
  }
  args.back() = "1000";
  const CommandResult refused = heed(args);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("the smallest budget that fits is"), std::string::npos) << refused.err;
}

TEST_F(HeedTool, RunDecodeUnderAScoreCap) {
  const Problem problem = make_problem(1, 8, 2, 1, 300, 32, 32, 8);
  write_problem(*this, problem, npy::ElementType::Float16);
  const CommandResult result = heed(run_args(*this, {"--max-score-bytes", "4096"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  expect_output_matches(path("out.npy"), out_shape_of(problem),
                        oracle(problem, DType::Float16, default_scale(problem), {}),
                        DType::Float16);
}

TEST_F(HeedTool, RunRejectsHeadsThatDoNotGroup) {
  const Problem problem = make_problem(1, 3, 2, 4, 4, 8, 8, 9);
  write_problem(*this, problem, npy::ElementType::Float32);
  const CommandResult result = heed(run_args(*this, {}));
  expect_clean_failure(*this, result, 1);
  EXPECT_NE(result.err.find("multiple"), std::string::npos) << result.err;
}

TEST_F(HeedTool, RunLeavesAnExistingOutputAloneOnError) {
  const Problem problem = make_problem(1, 3, 2, 4, 4, 8, 8, 9);
  write_problem(*this, problem, npy::ElementType::Float32);
  { std::ofstream(path("out.npy")) << "previous"; }
  const CommandResult result = heed(run_args(*this, {}));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(read_text(path("out.npy")), "previous");
}

TEST_F(HeedTool, RunRejectsMissingAndTruncatedFiles) {
  const Problem problem = make_problem(1, 2, 2, 4, 4, 8, 8, 10);
  write_problem(*this, problem, npy::ElementType::Float32);
  fs::remove(path("input_k.npy"));
  CommandResult result = heed(run_args(*this, {}));
  expect_clean_failure(*this, result, 1);
  EXPECT_NE(result.err.find("input_k.npy"), std::string::npos) << result.err;

  write_problem(*this, problem, npy::ElementType::Float32);
  fs::resize_file(path("input_v.npy"), fs::file_size(path("input_v.npy")) - 5);
  result = heed(run_args(*this, {}));
  expect_clean_failure(*this, result, 1);
  EXPECT_NE(result.err.find("truncated"), std::string::npos) << result.err;

  write_problem(*this, problem, npy::ElementType::Float32);
  npy::write(path("input_mask.npy"), npy::from_bools({3, 3}, std::vector<std::uint8_t>(9, 1)));
  result = heed(run_args(*this, {"--mask", path("input_mask.npy")}));
  expect_clean_failure(*this, result, 1);
}

TEST_F(HeedTool, UsageErrorsExitWithTwo) {
  const std::vector<std::vector<std::string>> misuses = {
      {},
      {"frobnicate"},
      {"run", "--bogus"},
      {"run", "--q"},
      {"run", "--q", "a.npy"},
      {"plan", "--q", "1,2,x", "--k", "1,2,3,4", "--v", "1,2,3,4"},
      {"plan", "--q", "1,2,3", "--k", "1,2,3,4", "--v", "1,2,3,4"},
      {"plan", "--q", "1,2,3,4", "--k", "1,2,3,4", "--v", "1,2,3,4", "--dtype", "f64"},
      {"plan", "--q", "1,2,3,4", "--k", "1,2,3,4", "--v", "1,2,3,4", "--window", "0"},
      {"plan", "--q", "1,2,3,4", "--k", "1,2,3,4", "--v", "1,2,3,4", "--mask-shape", "1,2,3"},
      {"plan", "--q", "1,2,3,4", "--k", "1,2,3,4", "--v", "1,2,3,4", "--route", "fast"},
      {"plan", "--q", "1,2,3,4", "--q", "1,2,3,4"},
      {"plan", "stray"},
      {"bench", "--case", "no-such-case"},
      {"bench", "--reps", "0"},
  };
  for (const auto& args : misuses) {
    const CommandResult result = heed(args);
    std::string joined;
    for (const auto& arg : args) joined += arg + " ";
    EXPECT_EQ(result.exit_code, 2) << joined << "-> " << result.err;
    EXPECT_EQ(result.err.rfind("heed:", 0), 0u) << joined << "-> " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
        << joined << "-> " << result.err;
  }
  const CommandResult unknown_case = heed({"bench", "--case", "no-such-case"});
  EXPECT_NE(unknown_case.err.find("bge-small"), std::string::npos) << unknown_case.err;
}

TEST_F(HeedTool, HelpExitsWithZero) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"},
                                                                {"plan", "--help"},
                                                                {"explain", "-h"},
                                                                {"run", "--help"},
                                                                {"bench", "--help"}}) {
    const CommandResult result = heed(args);
    EXPECT_EQ(result.exit_code, 0) << args.front() << ": " << result.err;
    EXPECT_NE(result.out.find("usage: heed"), std::string::npos) << result.out;
  }
}

// Any string value in the document that names a route.
bool names_a_route(const test_json::Value& value) {
  using Kind = test_json::Value::Kind;
  for (const char* route : {"vector", "tiled", "composed", "composed_blocks"}) {
    if (value.kind == Kind::String && value.text.rfind(route, 0) == 0) return true;
  }
  for (const auto& item : value.items) {
    if (names_a_route(item)) return true;
  }
  for (const auto& [key, member] : value.members) {
    if (names_a_route(member)) return true;
  }
  return false;
}

TEST_F(HeedTool, PlanJsonNamesARoute) {
  const CommandResult result = heed({"plan", "--q", "1,32,4096,128", "--k", "1,8,4096,128", "--v",
                                     "1,8,4096,128", "--dtype", "bf16", "--causal", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const test_json::Value plan = test_json::parse(result.out);
  EXPECT_EQ(plan.kind, test_json::Value::Kind::Object);
  EXPECT_TRUE(names_a_route(plan)) << result.out;
}

TEST_F(HeedTool, PlanAndExplainPrintTheDecision) {
  const std::vector<std::string> shapes = {
      "--q",          "2,8,1,64",   "--k",     "2,2,1000,64",       "--v",   "2,2,1000,64",
      "--mask-shape", "2,1,1,1000", "--sinks", "--max-score-bytes", "100000"};
  std::vector<std::string> plan_args = {"plan"};
  plan_args.insert(plan_args.end(), shapes.begin(), shapes.end());
  const CommandResult plan = heed(plan_args);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  for (const char* field :
       {"kernel: ", "kernel_name: ", "scratch_bytes: ", "max_intermediate_bytes: ", "capped: ",
        "workers: ", "buffers:", "explain:"}) {
    EXPECT_NE(plan.out.find(field), std::string::npos) << field << " missing from\n" << plan.out;
  }
  std::vector<std::string> explain_args = {"explain"};
  explain_args.insert(explain_args.end(), shapes.begin(), shapes.end());
  const CommandResult explain = heed(explain_args);
  ASSERT_EQ(explain.exit_code, 0) << explain.err;
  EXPECT_EQ(explain.out.rfind("heed plans ", 0), 0u) << explain.out;
}

// HEED_CPU_TILED_ROWS and HEED_CPU_TILED_KEYS replace the planner's rows per tiled task and
// its key tile limit, and the plan says so.
TEST_F(HeedTool, TilingKnobsReachThePlan) {
  const std::vector<std::string> args = {"explain", "--q", "2,4,512,64", "--k", "2,4,512,64", "--v", "2,4,512,64"};
  const CommandResult plain = heed(args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("HEED_CPU_TILED"), std::string::npos) << plain.out;
  std::vector<std::string> knob = {"env", "HEED_CPU_TILED_ROWS=48", "HEED_CPU_TILED_KEYS=64", HEED_CLI_PATH};
  std::string command;
  for (const std::string& arg : knob) command += shell_quote(arg) + " ";
  for (const std::string& arg : args) command += shell_quote(arg) + " ";
  command += ">" + shell_quote(path("knob.txt"));
  ASSERT_EQ(std::system(command.c_str()), 0);
  const std::string out = read_text(path("knob.txt"));
  EXPECT_NE(out.find("tiled(block_q=48, block_k=64)"), std::string::npos) << out;
  EXPECT_NE(out.find("HEED_CPU_TILED_ROWS=48"), std::string::npos) << out;
  EXPECT_NE(out.find("at most 64 keys per tile from HEED_CPU_TILED_KEYS"), std::string::npos) << out;
}

TEST_F(HeedTool, PlanRejectsInvalidShapesWithHeedsMessage) {
  const CommandResult result =
      heed({"plan", "--q", "1,32,16,64", "--k", "1,6,16,64", "--v", "1,6,16,64"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err.rfind("[heed", 0), 0u) << result.err;
  EXPECT_NE(result.err.find("32"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("6"), std::string::npos) << result.err;
}

// A zero-size problem whose other sizes reach int64's limit (validation bounds no product of
// them) plans without overflow and prints sane figures: no scratch, no workers, nothing negative.
TEST_F(HeedTool, PlanOfAnEmptyProblemWithHugeSizes) {
  const std::string huge = "9223372036854775807";
  const CommandResult result = heed({"plan", "--q", "0,8," + huge + ",64", "--k", "0,1," + huge + ",64", "--v",
                                     "0,1," + huge + ",64"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const char* line : {"scratch_bytes: 0 ", "max_intermediate_bytes: 0 ", "workers: 0\n", "buffers: none",
                           "empty output: nothing runs and no scratch is held"}) {
    EXPECT_NE(result.out.find(line), std::string::npos) << line << " missing from\n" << result.out;
  }
  for (std::size_t at = result.out.find('-'); at != std::string::npos; at = result.out.find('-', at + 1)) {
    EXPECT_FALSE(at + 1 < result.out.size() && std::isdigit(static_cast<unsigned char>(result.out[at + 1])))
        << "a negative figure in\n" << result.out;
  }
}

TEST_F(HeedTool, CudaWithoutADeviceFailsCleanly) {
  if (Device::default_device().type == DeviceType::CUDA) GTEST_SKIP() << "a CUDA device is present";
  const Problem problem = make_problem(1, 2, 2, 4, 4, 8, 8, 11);
  write_problem(*this, problem, npy::ElementType::Float32);
  const CommandResult result = heed(run_args(*this, {"--device", "cuda"}));
  expect_clean_failure(*this, result, 1);
}

TEST_F(HeedTool, BenchPrintsJsonForANamedCase) {
  const CommandResult result =
      heed({"bench", "--case", "bge-small", "--case", "llama3-8b-decode-bf16", "--reps", "1",
            "--json", "--max-len", "64"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const test_json::Value cases = test_json::parse(result.out);
  ASSERT_EQ(cases.kind, test_json::Value::Kind::Array) << result.out;
  ASSERT_EQ(cases.items.size(), 2u);
  const test_json::Value& bge = cases.items[0];
  EXPECT_EQ(bge.find("name")->text, "bge-small");
  EXPECT_EQ(bge.find("q_len")->number, 64);
  EXPECT_EQ(bge.find("head_dim")->number, 32);
  EXPECT_GT(bge.find("median_ms")->number, 0.0);
  EXPECT_TRUE(names_a_route(*bge.find("route")));
  for (const auto& item : cases.items) {
    const test_json::Value* diff = item.find("max_abs_diff");
    ASSERT_NE(diff, nullptr);
    if (diff->kind == test_json::Value::Kind::Number) {
      EXPECT_LE(diff->number, 1e-2) << result.out;
    }
  }
  EXPECT_EQ(cases.items[1].find("memory_bound")->boolean, true);
}

TEST_F(HeedTool, BenchComparesWithPyTorchUnlessToldNot) {
  // Either PyTorch runs beside heed, or the table says why it does not: never silence.
  const CommandResult table = heed({"bench", "--case", "bge-small", "--reps", "1", "--max-len", "16"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const bool compared = table.out.find("PyTorch's scaled_dot_product_attention") != std::string::npos;
  const bool explained = table.out.find("PyTorch: ") != std::string::npos;
  EXPECT_TRUE(compared || explained) << table.out;
  const CommandResult skipped =
      heed({"bench", "--case", "bge-small", "--reps", "1", "--max-len", "16", "--no-torch"});
  ASSERT_EQ(skipped.exit_code, 0) << skipped.err;
  EXPECT_EQ(skipped.out.find("PyTorch"), std::string::npos) << skipped.out;
}

// --no-composed times heed's route alone: the record says why there is no speedup.
TEST_F(HeedTool, BenchWithoutTheComposedRoute) {
  const CommandResult json =
      heed({"bench", "--json", "--no-composed", "--case", "bge-small", "--reps", "1", "--max-len", "16"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"composed_ms\": null"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("composed route not timed (--no-composed)"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"median_ms\": "), std::string::npos) << json.out;
  const CommandResult timed = heed({"bench", "--json", "--case", "bge-small", "--reps", "1", "--max-len", "16"});
  ASSERT_EQ(timed.exit_code, 0) << timed.err;
  EXPECT_EQ(timed.out.find("\"composed_ms\": null"), std::string::npos) << timed.out;
}

}  // namespace
}  // namespace heed
