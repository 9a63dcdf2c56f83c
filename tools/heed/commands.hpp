#pragma once
// The subcommands of the heed tool. Each takes the words after its name and returns the exit
// code; usage errors throw cli::UsageError (exit 2), heed errors throw heed::Error (exit 1).

#include <string>
#include <vector>

#include "args.hpp"
#include "heed/device.hpp"
#include "heed/options.hpp"

namespace heed::cli {

int plan_command(const std::vector<std::string>& tokens);     // heed plan
int explain_command(const std::vector<std::string>& tokens);  // heed explain
int run_command(const std::vector<std::string>& tokens);      // heed run
int bench_command(const std::vector<std::string>& tokens);    // heed bench

// Shared by plan, explain and run.
Device parse_device(const std::string& command, const std::string& text);  // cpu, cuda, cuda:N
RouteChoice parse_route(const std::string& command, const std::string& text);
// The options of one attention call that plan, explain and run share (--causal, --window,
// --softcap, --max-score-bytes, --route): their flags, their help lines, and into `options`.
const std::vector<FlagSpec>& common_option_flags();
const char* common_option_help();
std::vector<FlagSpec> with_common_options(std::vector<FlagSpec> flags);
void apply_common_options(const Args& args, AttentionOptions& options);
// "1.50 MiB"
std::string human_bytes(double bytes);

}  // namespace heed::cli
