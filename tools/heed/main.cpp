// The heed command-line tool: plan, explain, run and bench. Exit codes: 0 success,
// 1 a heed error (its message on stderr), 2 a usage error.

#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "heed/error.hpp"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

constexpr const char* kUsage =
    "usage: heed <command> [options]\n"
    "\n"
    "Exact scaled-dot-product attention: plan a call, explain the plan, run it on .npy files,\n"
    "or benchmark the model-shape suite.\n"
    "\n"
    "commands:\n"
    "  plan      print the plan of a call from shapes (--json for plan.to_json())\n"
    "  explain   say why the plan is what it is\n"
    "  run       attention over .npy files\n"
    "  bench     time heed against the composed route on real model shapes\n"
    "\n"
    "heed <command> --help shows a command's options.\n";

int dispatch(const std::string& command, const std::vector<std::string>& tokens) {
  if (command == "plan") return heed::cli::plan_command(tokens);
  if (command == "explain") return heed::cli::explain_command(tokens);
  if (command == "run") return heed::cli::run_command(tokens);
  if (command == "bench") return heed::cli::bench_command(tokens);
  throw heed::cli::UsageError("heed: unknown command '" + command +
                              "' (commands: plan, explain, run, bench; see heed --help)");
}

int run_tool(int argc, char** argv) {
  if (argc < 2) {
    throw heed::cli::UsageError(
        "heed: missing command (plan, explain, run or bench; see heed --help)");
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  const std::vector<std::string> tokens(argv + 2, argv + argc);
  return dispatch(command, tokens);
}

}  // namespace

int main(int argc, char** argv) {
  // Anything thrown is reported on one line; the tool never ends by an uncaught exception.
  try {
    const int code = run_tool(argc, argv);
    std::cout.flush();
    return std::cout.good() ? code : kExitError;
  } catch (const heed::cli::UsageError& error) {
    std::cerr << error.what() << "\n";
    return kExitUsage;
  } catch (const heed::Error& error) {
    std::cerr << error.what() << "\n";
    return kExitError;
  } catch (const std::bad_alloc&) {
    std::cerr << "heed: out of memory\n";
    return kExitError;
  } catch (const std::exception& error) {
    std::cerr << "heed: internal error: " << error.what() << "\n";
    return kExitError;
  } catch (...) {
    std::cerr << "heed: internal error: unknown exception\n";
    return kExitError;
  }
}
