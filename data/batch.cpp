// Padding of id sequences into a Batch.
#include "data/batch.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace nmt {

int64_t Batch::src_tokens() const {
  int64_t n = 0;
  for (int32_t l : src_lengths) n += l;
  return n;
}

int64_t Batch::tgt_tokens() const {
  int64_t n = 0;
  for (int32_t l : tgt_lengths) n += l;
  return n;
}

static int64_t round_up(int64_t n, int64_t multiple) {
  n = std::max<int64_t>(n, 1);
  return multiple > 1 ? (n + multiple - 1) / multiple * multiple : n;
}

Batch make_batch(const std::vector<std::vector<int32_t>>& sources,
                 const std::vector<std::vector<int32_t>>& targets, const std::vector<int64_t>& ids,
                 int64_t pad_multiple) {
  if (sources.size() != targets.size() || sources.size() != ids.size())
    throw std::invalid_argument("make_batch: sources, targets and ids differ in count");
  Batch b;
  b.sentences = static_cast<int64_t>(sources.size());
  size_t max_src = 0, max_tgt = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    max_src = std::max(max_src, sources[i].size());
    max_tgt = std::max(max_tgt, targets[i].size() + 1);
  }
  b.src_len = round_up(static_cast<int64_t>(max_src), pad_multiple);
  b.tgt_len = round_up(static_cast<int64_t>(max_tgt), pad_multiple);
  b.src.assign(b.sentences * b.src_len, kPadId);
  b.tgt_in.assign(b.sentences * b.tgt_len, kPadId);
  b.tgt_out.assign(b.sentences * b.tgt_len, kPadId);
  b.ids = ids;
  for (int64_t i = 0; i < b.sentences; ++i) {
    const auto& s = sources[i];
    const auto& t = targets[i];
    std::copy(s.begin(), s.end(), b.src.begin() + i * b.src_len);
    int32_t* in = b.tgt_in.data() + i * b.tgt_len;
    int32_t* out = b.tgt_out.data() + i * b.tgt_len;
    in[0] = kBosId;
    for (size_t j = 0; j < t.size(); ++j) {
      in[j + 1] = t[j];
      out[j] = t[j];
    }
    out[t.size()] = kEosId;
    b.src_lengths.push_back(static_cast<int32_t>(s.size()));
    b.tgt_lengths.push_back(static_cast<int32_t>(t.size() + 1));
  }
  return b;
}

namespace {

// order [2 * ids.size()]: keys ascending, then rows (see Batch::src_order).
void row_order(const std::vector<int32_t>& ids, std::vector<int32_t>& order) {
  const size_t n = ids.size();
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument("add_row_orders: " + std::to_string(n) + " ids");
  int32_t top = -1;  // the largest real id
  for (int32_t id : ids)
    if (id != kPadId && id > top) top = id;
  const auto key = [](int32_t id) { return id == kPadId || id < 0 ? kOrderPadKey : id; };
  order.resize(2 * n);
  if (static_cast<size_t>(top) > 4 * n + 65536) {
    // Ids far above the batch's size (a corrupt one near INT32_MAX would make the counting sort's
    // table gigabytes): a stable sort of the rows by key instead, the same order.
    std::vector<int32_t> rows(n);
    for (size_t i = 0; i < n; ++i) rows[i] = static_cast<int32_t>(i);
    std::stable_sort(rows.begin(), rows.end(),
                     [&](int32_t a, int32_t b) { return key(ids[a]) < key(ids[b]); });
    for (size_t i = 0; i < n; ++i) {
      order[i] = key(ids[static_cast<size_t>(rows[i])]);
      order[n + i] = rows[i];
    }
    return;
  }
  // starts[k]: where key k's rows begin; bucket top + 1 holds the pad rows.
  std::vector<int32_t> starts(static_cast<size_t>(top) + 3, 0);
  const auto bucket = [&](int32_t id) {
    const int32_t k = key(id);
    return k == kOrderPadKey ? static_cast<size_t>(top) + 1 : static_cast<size_t>(k);
  };
  for (int32_t id : ids) ++starts[bucket(id) + 1];
  for (size_t k = 1; k < starts.size(); ++k) starts[k] += starts[k - 1];
  for (size_t i = 0; i < n; ++i) {
    const size_t b = bucket(ids[i]);
    const auto at = static_cast<size_t>(starts[b]++);
    order[at] = key(ids[i]);
    order[n + at] = static_cast<int32_t>(i);
  }
}

}  // namespace

void add_row_orders(Batch& batch) {
  row_order(batch.src, batch.src_order);
  row_order(batch.tgt_in, batch.tgt_order);
}

}  // namespace nmt
