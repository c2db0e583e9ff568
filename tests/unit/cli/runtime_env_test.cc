// The runtime's environment knobs: unset and empty mean the default, "0" is off for a flag, and an
// integer outside its range or with trailing text is an error that names the variable.
#include "cli/runtime_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/status.h"

namespace pagoda {
namespace {

constexpr const char* kName = "PAGODA_TEST_ENV_KNOB";

class EnvKnobs : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kName); }
  static void set(const char* value) { setenv(kName, value, 1); }
};

TEST_F(EnvKnobs, FlagDefaultsWhenUnsetOrEmpty) {
  unsetenv(kName);
  EXPECT_FALSE(env_flag(kName, false));
  EXPECT_TRUE(env_flag(kName, true));
  set("");
  EXPECT_FALSE(env_flag(kName, false));
  EXPECT_TRUE(env_flag(kName, true));
}

TEST_F(EnvKnobs, FlagIsOffOnlyForZero) {
  set("0");
  EXPECT_FALSE(env_flag(kName, true));
  for (const char* on : {"1", "yes", "true", "00"}) {
    set(on);
    EXPECT_TRUE(env_flag(kName, false)) << on;
  }
}

TEST_F(EnvKnobs, IntParsesWithinRange) {
  unsetenv(kName);
  EXPECT_EQ(env_int(kName, 7, 1, 10), 7);
  set("");
  EXPECT_EQ(env_int(kName, 7, 1, 10), 7);
  set("10");
  EXPECT_EQ(env_int(kName, 7, 1, 10), 10);
  set("-3");
  EXPECT_EQ(env_int(kName, 7, -5, 10), -3);
}

TEST_F(EnvKnobs, IntRejectsBadValuesNamingTheVariable) {
  for (const char* bad : {"11", "0", "12x", "abc", "1.5"}) {
    set(bad);
    try {
      (void)env_int(kName, 7, 1, 10);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(kName), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[1, 10]"), std::string::npos) << e.what();
    }
  }
}

TEST_F(EnvKnobs, RuntimeOptionsComeFromTheEnvironmentOnce) {
  const RuntimeOptions defaults = runtime_options_from_env();
  EXPECT_TRUE(defaults.cuda_graphs);
  EXPECT_EQ(defaults.attention_min_split_keys, 64);
  EXPECT_TRUE(defaults.chained_drafts);
  setenv("PAGODA_ATTENTION_MIN_SPLIT_KEYS", "128", 1);
  setenv("PAGODA_UNCHAINED_DRAFTS", "1", 1);
  setenv("PAGODA_ENFORCE_EAGER", "1", 1);
  setenv("PAGODA_PDL", "1", 1);
  const RuntimeOptions o = runtime_options_from_env();
  unsetenv("PAGODA_ATTENTION_MIN_SPLIT_KEYS");
  unsetenv("PAGODA_ENFORCE_EAGER");
  unsetenv("PAGODA_PDL");
  unsetenv("PAGODA_UNCHAINED_DRAFTS");
  EXPECT_FALSE(o.chained_drafts);
  EXPECT_EQ(o.attention_min_split_keys, 128);
  EXPECT_FALSE(o.cuda_graphs);
  EXPECT_TRUE(o.dependent_launch);
  setenv("PAGODA_GEMV_MMA_ROWS", "9", 1);
  EXPECT_THROW((void)runtime_options_from_env(), InvalidArgument);
  unsetenv("PAGODA_GEMV_MMA_ROWS");
}

}  // namespace
}  // namespace pagoda
