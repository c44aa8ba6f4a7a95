// ParamStore::join: members laid out back to back, the joined views, and the refusals.
#include <stdexcept>

#include "engine/model/param_store.h"
#include "test/support/catch.h"

using nmt::Param;
using nmt::ParamKind;
using nmt::ParamStore;

TEST_CASE("joined parameters sit back to back and are seen as one tensor", "[engine]") {
  ParamStore store;
  Param* a = store.add("a.weight", {2, 3}, ParamKind::weight);
  Param* b = store.add("b.weight", {2, 3}, ParamKind::weight);
  Param* between = store.add("between.bias", {5}, ParamKind::bias);
  Param* c = store.add("c.weight", {2, 3}, ParamKind::weight);
  const nmt::ParamGroup* g = store.join({a, b, c});
  nmt::Arena arena(nmt::Device::cpu, 4096);
  store.finalize(arena, nmt::DType::f32);

  // Reverse registration order puts c first; the group goes there, in its own order.
  CHECK(a->offset == 0);
  CHECK(b->offset == 6);
  CHECK(c->offset == 12);
  CHECK(between->offset == 18);
  CHECK(store.total_elements() == 23);
  REQUIRE(g->compute.rank == 2);
  CHECK(g->compute.dim(0) == 6);
  CHECK(g->compute.dim(1) == 3);
  CHECK(g->compute.data == a->value.data);
  CHECK(g->grad.data == a->grad.data);
  CHECK(g->grad.numel() == 18);
}

TEST_CASE("a parameter group of mixed shapes, or a parameter in two groups, is refused",
          "[engine]") {
  ParamStore store;
  Param* a = store.add("a.weight", {2, 3}, ParamKind::weight);
  Param* b = store.add("b.weight", {3, 3}, ParamKind::weight);
  Param* c = store.add("c.weight", {2, 3}, ParamKind::weight);
  Param* bias = store.add("c.bias", {2, 3}, ParamKind::bias);
  CHECK_THROWS_AS(store.join({}), std::logic_error);
  CHECK_THROWS_AS(store.join({a, b}), std::logic_error);
  CHECK_THROWS_AS(store.join({a, bias}), std::logic_error);
  store.join({a, c});
  CHECK_THROWS_AS(store.join({c, a}), std::logic_error);
}
