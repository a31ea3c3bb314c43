// mosaic-cli: the headless face of the engine. Exit codes: 0 done, 2 a mistake of the caller's
// (bad arguments, bad input files), 3 an internal error.
#include <filesystem>
#include <iostream>
#include <sstream>
#include <new>
#include <optional>
#include <utility>
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/machine.h"
#include "cli/commands.h"
#include "common/edit_distance.h"
#include "common/error.h"

namespace {

// An argument that names no command of `app` (the tool's, or a command's own such as `esft`'s):
// say so, with its commands and the nearest one. `path`: how `app` is called ("mosaic-cli esft").
int unknown_command(const CLI::App& app, const std::string& name, const std::string& path) {
  std::string list;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    list += (list.empty() ? "" : ", ") + sub->get_name();
    names.push_back(sub->get_name());
  }
  const std::string_view nearest = mosaic::nearest_name(name, std::vector<std::string_view>(names.begin(), names.end()));
  std::cerr << "error: '" << name << "' is not a " << path << " command";
  if (!nearest.empty()) std::cerr << " (did you mean '" << nearest << "'?)";
  std::cerr << "\n  commands: " << list << "\n  " << path << " COMMAND --help describes one\n";
  return 2;
}

// Where argv names a command that does not exist, at any depth (`mosaic-cli esft exprt`): the exit
// code of saying so, else nullopt. Checked before parsing, which would say only that one is required.
std::optional<int> check_command_names(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  std::string path = "mosaic-cli";
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const auto subs = at->get_subcommands({});
    if (subs.empty()) break;  // a command's own arguments from here
    const auto next = std::find_if(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->check_name(argv[i]); });
    if (next == subs.end()) return unknown_command(*at, argv[i], path);
    at = *next;
    path += " " + at->get_name();
  }
  return std::nullopt;
}

// The command a mistake was made in: the deepest subcommand parsed, else the tool itself; and how it
// is called ("mosaic-cli esft export").
const CLI::App* command_of(const CLI::App* app, std::string& path) {
  for (const CLI::App* sub : app->get_subcommands())
    if (sub->parsed()) {
      path += " " + sub->get_name();
      return command_of(sub, path);
    }
  return app;
}

// Options users bring from elsewhere (OpenAI's max_tokens, transformers' max_new_tokens) that no edit
// distance leads to the option meant.
constexpr std::pair<std::string_view, std::string_view> kSynonyms[] = {
    {"--max-tokens", "--max-new"}, {"--max_tokens", "--max-new"}, {"--max-new-tokens", "--max-new"}, {"--max_new_tokens", "--max-new"}};

// The option nearest to an unknown one, among the command's own ("" when none is near).
std::string nearest_option(const CLI::App& cmd, std::string_view given) {
  const std::string_view name = given.substr(0, given.find('='));
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  for (const auto& [synonym, meant] : kSynonyms)
    if (name == synonym && std::find(names.begin(), names.end(), meant) != names.end()) return std::string(meant);
  return std::string(mosaic::nearest_name(name, std::vector<std::string_view>(names.begin(), names.end())));
}

// Every mistake on the command line in the one format of every user error: "error: …", the nearest
// valid option when one is unknown, and where the options are described.
std::string failure_message(const CLI::App* app, const CLI::Error& e) {
  std::string path = "mosaic-cli";
  const CLI::App* cmd = command_of(app, path);
  std::string msg = "error: ";
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // CLI11 lists the arguments it did not expect after a colon, separated by spaces.
    const std::string what = e.what();
    const std::size_t colon = what.find(": ");
    std::istringstream args(colon == std::string::npos ? std::string() : what.substr(colon + 2));
    std::vector<std::string> given, unknown, hints;
    for (std::string a; args >> a;) given.insert(given.begin(), a);  // CLI11 lists them last first
    for (const std::string& a : given) {
      unknown.push_back("'" + a + "'");
      if (a.size() > 1 && a[0] == '-')
        if (const std::string near = nearest_option(*cmd, a); !near.empty()) hints.push_back("'" + near + "' for '" + a + "'");
    }
    msg += path + ": ";
    for (std::size_t i = 0; i < unknown.size(); ++i) msg += (i ? ", " : "") + unknown[i];
    msg += unknown.size() == 1 ? " is not an option or argument it takes" : " are not options or arguments it takes";
    if (!hints.empty()) {
      msg += " (did you mean ";
      for (std::size_t i = 0; i < hints.size(); ++i) msg += (i ? ", " : "") + hints[i];
      msg += "?)";
    }
  } else {
    // A required option misspelt (--varient) is left over, unparsed, when the parser finds the
    // required one missing: name it as the mistake, with the option meant, before what is missing.
    std::string misspelt;
    if (dynamic_cast<const CLI::RequiredError*>(&e))
      for (const std::string& a : cmd->remaining())
        if (a.size() > 2 && a.starts_with("--"))
          if (const std::string near = nearest_option(*cmd, a); !near.empty()) {
            misspelt = "'" + a + "' is not an option it takes (did you mean '" + near + "'?); ";
            break;
          }
    msg += path + ": " + misspelt + e.what();
  }
  return msg + "\n  " + path + " --help describes its options\n";
}

// Every command's --help, one after another, each under a "# mosaic-cli COMMAND" line: the whole
// reference in one call (and one process start, which LibTorch makes cost about a second).
void print_every_help(const CLI::App& app, const std::string& path) {
  for (const CLI::App* sub : app.get_subcommands({})) {
    std::cout << "# " << path << " " << sub->get_name() << "\n" << sub->help(path) << "\n";
    print_every_help(*sub, path + " " + sub->get_name());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mosaic-cli — serve and study fine-tuned variants of one MoE model"};
  app.name("mosaic-cli");  // in every usage line, however the program was started
  app.require_subcommand(1);
  // Set before the commands are added: each takes its parent's at creation.
  app.failure_message(failure_message);
  app.set_version_flag("--version", std::string("mosaic-cli ") + mosaic::mosaic_version());
  mosaic::cli::add_inspect_command(app);
  mosaic::cli::add_generate_command(app);
  mosaic::cli::add_serve_command(app);
  mosaic::cli::add_logits_command(app);
  mosaic::cli::add_analyze_command(app);
  mosaic::cli::add_consolidate_command(app);
  mosaic::cli::add_plan_virtual_command(app);
  mosaic::cli::add_routing_command(app);
  mosaic::cli::add_merge_command(app);
  mosaic::cli::add_delta_command(app);
  mosaic::cli::add_esft_command(app);
  mosaic::cli::add_bench_command(app);
  mosaic::cli::add_report_command(app);
  mosaic::cli::add_runs_command(app);
  mosaic::cli::add_forge_command(app);
  mosaic::cli::add_eval_command(app);
  mosaic::cli::add_bench_quality_command(app);
  mosaic::cli::add_bench_forward_command(app);
  mosaic::cli::add_bench_analysis_command(app);
  mosaic::cli::add_bench_runtime_command(app);
  mosaic::cli::add_bench_serve_command(app);
  mosaic::cli::add_bench_cuda_command(app);
  mosaic::cli::add_bench_esft_command(app);
  mosaic::cli::add_bench_device_command(app);
  mosaic::cli::add_bench_delta_command(app);
  mosaic::cli::add_bench_deltas_command(app);
  mosaic::cli::add_bench_host_command(app);
  app.add_flag("--help-all")->description("print every command's help, one after another");
  if (argc == 2 && std::string_view(argv[1]) == "--help-all") {
    print_every_help(app, "mosaic-cli");
    return 0;
  }
  if (const auto code = check_command_names(app, argc, argv)) return *code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the message, or the help and the version asked for
    return code == 0 ? 0 : 2;
  } catch (const mosaic::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the file system refuses (a symbolic-link loop, no permission): their
    // input, not Mosaic's fault.
    std::cerr << "error: " << e.path1().string() << ": " << e.code().message() << " (check the path)\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory: an input asks for more than this machine has (check sizes in the config and the flags)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
