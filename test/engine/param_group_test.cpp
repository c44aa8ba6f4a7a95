// ParamStore::join and join_groups: members laid out back to back, the joined views, and the
// refusals.
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

TEST_CASE("joined groups sit back to back in front of the parameter named, each part a slice",
          "[engine]") {
  ParamStore store;
  Param* head = store.add("head.bias", {4}, ParamKind::bias);
  Param* a0 = store.add("l0.k.weight", {2, 3}, ParamKind::weight);
  Param* b0 = store.add("l0.v.weight", {2, 3}, ParamKind::weight);
  Param* x0 = store.add("l0.x.bias", {5}, ParamKind::bias);
  Param* a1 = store.add("l1.k.weight", {2, 3}, ParamKind::weight);
  Param* b1 = store.add("l1.v.weight", {2, 3}, ParamKind::weight);
  Param* x1 = store.add("l1.x.bias", {5}, ParamKind::bias);
  const nmt::ParamGroup* g0 = store.join({a0, b0});
  const nmt::ParamGroup* g1 = store.join({a1, b1});
  const nmt::ParamGroup* all = store.join_groups({g0, g1}, head);
  nmt::Arena arena(nmt::Device::cpu, 4096);
  store.finalize(arena, nmt::DType::f32);

  // Reverse registration order, the joined members skipped where they were registered and laid
  // out, part after part, directly in front of `head`.
  CHECK(x1->offset == 0);
  CHECK(x0->offset == 5);
  CHECK(a0->offset == 10);
  CHECK(b0->offset == 16);
  CHECK(a1->offset == 22);
  CHECK(b1->offset == 28);
  CHECK(head->offset == 34);
  CHECK(store.total_elements() == 38);
  REQUIRE(all->compute.rank == 2);
  CHECK(all->compute.dim(0) == 8);
  CHECK(all->compute.dim(1) == 3);
  CHECK(all->compute.data == a0->value.data);
  CHECK(all->grad.data == a0->grad.data);
  CHECK(all->grad.numel() == 24);
  // Each part sees its own slice.
  CHECK(g1->compute.data == a1->value.data);
  CHECK(g1->grad.data == a1->grad.data);
  CHECK(g1->compute.dim(0) == 4);
}

TEST_CASE("joining groups refuses what it cannot lay out", "[engine]") {
  ParamStore store;
  Param* head = store.add("head.bias", {4}, ParamKind::bias);
  Param* a = store.add("a.weight", {2, 3}, ParamKind::weight);
  Param* b = store.add("b.weight", {2, 3}, ParamKind::weight);
  Param* c = store.add("c.weight", {3, 3}, ParamKind::weight);
  Param* d = store.add("d.weight", {3, 3}, ParamKind::weight);
  Param* e = store.add("e.weight", {2, 3}, ParamKind::weight);
  const nmt::ParamGroup* ab = store.join({a, b});
  const nmt::ParamGroup* cd = store.join({c, d});
  const nmt::ParamGroup* lone = store.join({e});
  nmt::ParamGroup foreign;
  foreign.members = {a};
  foreign.shape = {2, 3};
  CHECK_THROWS_AS(store.join_groups({}, head), std::logic_error);
  CHECK_THROWS_AS(store.join_groups({&foreign}, head), std::logic_error);  // not made by join()
  CHECK_THROWS_AS(store.join_groups({ab, cd}, head), std::logic_error);    // mixed shapes
  CHECK_THROWS_AS(store.join_groups({ab, ab}, head), std::logic_error);    // a part twice
  CHECK_THROWS_AS(store.join_groups({ab}, nullptr), std::logic_error);
  CHECK_THROWS_AS(store.join_groups({ab}, a), std::logic_error);  // in front of its own member
  const nmt::ParamGroup* joined = store.join_groups({ab}, head);
  CHECK_THROWS_AS(store.join_groups({joined}, head), std::logic_error);    // not made by join()
  CHECK_THROWS_AS(store.join_groups({ab, lone}, head), std::logic_error);  // ab joined already
  CHECK_THROWS_AS(store.join_groups({lone}, b), std::logic_error);  // in front of a joined member
}
