// EnvSwitch (kernels/env_switch.h): the environment presets it at the first get(), "1" on, "0"
// off, anything else the default; set() overrides it either way.
#include <cstdlib>

#include "kernels/env_switch.h"
#include "test/support/catch.h"

namespace nmt::test {

TEST_CASE("EnvSwitch reads its variable once, and set() decides over it", "[env_switch]") {
  const char* name = "NMT_TEST_ENV_SWITCH";
  struct Case {
    const char* value;  // nullptr: unset
    bool default_on, expected;
  };
  const Case cases[] = {{nullptr, false, false}, {nullptr, true, true}, {"1", false, true},
                        {"0", true, false},      {"yes", false, false}, {"yes", true, true},
                        {"", true, true}};
  for (const Case& c : cases) {
    INFO("value " << (c.value ? c.value : "(unset)") << ", default " << c.default_on);
    if (c.value)
      setenv(name, c.value, 1);
    else
      unsetenv(name);
    EnvSwitch sw(name, c.default_on);
    CHECK(sw.get() == c.expected);
    setenv(name, c.expected ? "0" : "1", 1);  // read once: a later change is not seen
    CHECK(sw.get() == c.expected);
    sw.set(!c.expected);
    CHECK(sw.get() == !c.expected);
  }
  unsetenv(name);
  EnvSwitch preset(name, true);
  preset.set(false);  // set() before any get(): the environment is never read
  setenv(name, "1", 1);
  CHECK_FALSE(preset.get());
  unsetenv(name);
}

}  // namespace nmt::test
