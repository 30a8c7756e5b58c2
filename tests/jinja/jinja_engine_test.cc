#include "jinja/template.h"

#include <gtest/gtest.h>

namespace spindle::jinja {
namespace {

TEST(JinjaEngine, RendersText) { EXPECT_EQ(Template("a{{ 1 + 2 }}b").render(nlohmann::ordered_json::object()), "a3b"); }

}  // namespace
}  // namespace spindle::jinja
