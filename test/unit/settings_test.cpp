#include "base/settings.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "hiercoll/errors.hpp"

using namespace hiercoll;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Sets a variable for one scope.
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

}  // namespace

TEST_CASE("docs/tuning.md documents exactly the declared knobs, with their defaults", "[settings]") {
  std::string doc = read_file(std::filesystem::path(HIERCOLL_SOURCE_DIR) / "docs" / "tuning.md");
  doc = doc.substr(0, doc.find("\nLaunch environment ("));  // the knobs' table; the launch variables follow it
  std::map<std::string, std::string> documented;  // variable -> its row's default column
  std::regex row(R"(^\| ([^|]*) \| ([^|]*) \|)");
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    std::string names = m[1], fallback = m[2];
    std::regex variable("`((?:HIERCOLL|FI)_[A-Z0-9_]+)`");
    for (auto it = std::sregex_iterator(names.begin(), names.end(), variable); it != std::sregex_iterator(); ++it) {
      documented[(*it)[1]] = fallback;
    }
  }
  std::set<std::string> declared;
  for (const base::Knob& knob : base::knobs()) {
    declared.insert(knob.name);
    INFO(knob.name);
    REQUIRE(documented.count(knob.name) == 1);
    if (*knob.fallback) CHECK_THAT(documented[knob.name], Catch::Contains(std::string("`") + knob.fallback + "`"));
  }
  for (const auto& [name, fallback] : documented) {
    INFO(name << " is documented but not declared in base/settings.cpp");
    CHECK(declared.count(name) == 1);
  }
  CHECK(declared.size() >= 20);
}

TEST_CASE("the environment is read in base/settings.cpp and launch/environment.cpp only", "[settings]") {
  // Any getenv or env_* call elsewhere in lib/ or bindings/ would be a second place settings come from. The
  // launch layer reads the launch environment (tuning.md's "Launch environment" table: every HIERCOLL_ variable it
  // reads is there); base/env.cpp is the helpers both use.
  std::string doc = read_file(std::filesystem::path(HIERCOLL_SOURCE_DIR) / "docs" / "tuning.md");
  std::string bootstrap = doc.substr(doc.find("\nLaunch environment ("));
  std::regex read(R"re((getenv|env_string|env_int|env_int_in|env_bytes)\(\s*"?([A-Za-z0-9_]*))re");
  int files = 0, bootstrap_reads = 0;
  for (const char* top : {"lib", "bindings"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(std::filesystem::path(HIERCOLL_SOURCE_DIR) / top)) {
      auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh") continue;
      ++files;
      const std::string name = entry.path().filename(), parent = entry.path().parent_path().filename();
      if (parent == "base" && (name == "settings.cpp" || name == "env.cpp" || name == "env.hpp")) continue;
      const bool is_bootstrap = parent == "launch" && name == "environment.cpp";
      std::string text = read_file(entry.path());
      for (auto it = std::sregex_iterator(text.begin(), text.end(), read); it != std::sregex_iterator(); ++it) {
        const std::string variable = (*it)[2];
        INFO(entry.path().string() << " reads the environment (" << (*it)[0] << ")");
        CHECK(is_bootstrap);
        if (is_bootstrap && variable.rfind("HIERCOLL_", 0) == 0) CHECK_THAT(bootstrap, Catch::Contains("`" + variable + "`"));
        bootstrap_reads += is_bootstrap;
      }
    }
  }
  CHECK(files > 40);
  CHECK(bootstrap_reads >= 1);  // the scan sees reads at all (HIERCOLL_STORE in launch/environment.cpp)
}

TEST_CASE("settings parse their variables, and name the variable when one is malformed", "[settings]") {
  base::Settings defaults = base::Settings::defaults();
  CHECK(defaults.chunk_bytes == (1u << 20));
  CHECK(defaults.pipeline_slots == 4);
  CHECK(defaults.algo.empty());
  CHECK_FALSE(defaults.check_collectives);
  {
    ScopedEnv chunk("HIERCOLL_CHUNK_BYTES", "512K"), algo("HIERCOLL_ALGO", "hier"), debug("HIERCOLL_DEBUG", "DETAIL");
    ScopedEnv bw("HIERCOLL_NET_BW_GBPS", "12.5"), timeout("HIERCOLL_TIMEOUT_MS", "2500");
    base::Settings s = base::Settings::from_env();
    CHECK(s.chunk_bytes == 512u << 10);
    CHECK(s.algo == "hier");
    CHECK(s.check_collectives);  // DETAIL turns the mismatch check on
    CHECK(s.net_bw_gbps == 12.5);
    CHECK(s.timeout_ms == 2500);
    CHECK(s.timeout_from_env);
    CHECK(base::Settings::defaults().chunk_bytes == (1u << 20));  // defaults ignore the environment
  }
  CHECK_FALSE(base::Settings::from_env().timeout_from_env);
  {
    // Kept as written: the selector's rows say which names it takes, and the create refuses others
    // (communicator_test.cpp).
    ScopedEnv algo("HIERCOLL_ALGO", "tree");
    CHECK(base::Settings::from_env().algo == "tree");
  }
  {
    ScopedEnv slots("HIERCOLL_PIPELINE_SLOTS", "0");
    CHECK_THROWS_WITH(base::Settings::from_env(), Catch::Contains("HIERCOLL_PIPELINE_SLOTS"));
  }
  {
    ScopedEnv piece("HIERCOLL_CUDA_PIECE_BYTES", "1K");
    CHECK_THROWS_AS(base::Settings::from_env(), InvalidUsageError);
  }
  {
    ScopedEnv bw("HIERCOLL_NET_BW_GBPS", "-1");
    CHECK_THROWS_WITH(base::Settings::from_env(), Catch::Contains("HIERCOLL_NET_BW_GBPS"));
  }
  {
    ScopedEnv slots("HIERCOLL_STRIPE_MIN_BYTES", "lots");
    CHECK_THROWS_WITH(base::Settings::from_env(), Catch::Contains("HIERCOLL_STRIPE_MIN_BYTES='lots'"));
  }
}
