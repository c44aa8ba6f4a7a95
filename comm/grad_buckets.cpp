// GradBuckets: bucket layout, ready-marking with overlap checks, starting a bucket's all-reduce as
// soon as it is complete, and the per-step communication statistics.
#include "comm/grad_buckets.h"

#include <algorithm>
#include <chrono>

#include "comm/check.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"
#include "kernels/elementwise.h"

namespace nmt {
namespace {

std::string range_text(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

template <class AddOverlap>
void GradBuckets::for_each_overlap(int64_t begin, int64_t end, AddOverlap&& add) const {
  for (int b = bucket_of(begin); b < static_cast<int>(buckets_.size()) && buckets_[b].begin < end;
       ++b)
    add(b, std::min(end, buckets_[b].end) - std::max(begin, buckets_[b].begin));
}

std::vector<ElementRange> plan_buckets(int64_t total, size_t element_bytes, size_t bucket_bytes,
                                       std::vector<ElementRange> params) {
  if (total < 0 || element_bytes == 0) {
    throw CommError("plan_buckets: bad buffer of " + std::to_string(total) + " elements");
  }
  int64_t capacity = static_cast<int64_t>(bucket_bytes / element_bytes);
  if (capacity >= 64) capacity -= capacity % 64;
  capacity = std::max<int64_t>(capacity, 1);

  if (params.empty() && total > 0) params.push_back({0, total});
  std::erase_if(params, [](const ElementRange& p) { return p.size() == 0; });
  std::sort(params.begin(), params.end(),
            [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  int64_t expected = 0;
  for (const ElementRange& p : params) {
    if (p.begin != expected || p.end < p.begin) {
      throw CommError("plan_buckets: the parameter ranges do not tile the gradient buffer of " +
                      std::to_string(total) +
                      " elements: " + (p.begin > expected ? "gap" : "overlap") + " at element " +
                      std::to_string(std::min(p.begin, expected)) + " (parameter " +
                      range_text(p.begin, p.end) + ")");
    }
    expected = p.end;
  }
  if (expected != total) {
    throw CommError("plan_buckets: the parameter ranges end at element " +
                    std::to_string(expected) + " but the gradient buffer has " +
                    std::to_string(total));
  }

  std::vector<ElementRange> buckets;
  ElementRange open{0, 0};
  auto close_open = [&] {
    if (open.size() > 0) buckets.push_back(open);
  };
  for (const ElementRange& p : params) {
    if (p.size() > capacity) {
      close_open();
      for (int64_t at = p.begin; at < p.end; at += capacity) {
        buckets.push_back({at, std::min(p.end, at + capacity)});
      }
      open = {p.end, p.end};
    } else if (open.size() + p.size() > capacity) {
      close_open();
      open = p;
    } else {
      open.end = p.end;
    }
  }
  close_open();
  return buckets;
}

GradBuckets::GradBuckets(Communicator& comm, const Tensor& grads, size_t bucket_bytes,
                         std::vector<ElementRange> params, std::optional<DType> wire_dtype)
    : comm_(comm), grads_(grads), total_(grads.numel()), bucket_bytes_(bucket_bytes) {
  if (grads.numel() > 0 && grads.empty()) {
    throw CommError("GradBuckets: null gradient buffer " + grads.shape_string());
  }
  grads_ = Tensor(grads.data, grads.dtype, grads.device, {total_});
  DType wire = wire_dtype.value_or(grads.dtype);
  if (wire != grads.dtype) {
    if (grads.device != Device::cuda || wire == DType::i32 || grads.dtype == DType::i32)
      throw CommError(std::string("GradBuckets: a ") + dtype_name(wire) + " wire for " +
                      grads_.shape_string() + " gradients needs float gradients on the GPU");
    void* data = nullptr;
    CUDA_CHECK(
        cudaMalloc(&data, static_cast<size_t>(std::max<int64_t>(total_, 1)) * dtype_size(wire)));
    wire_ = Tensor(data, wire, Device::cuda, {total_});
  }
  buckets_ = plan_buckets(total_, dtype_size(wire), bucket_bytes, std::move(params));
  if (grads.device == Device::cuda) {
    CUDA_CHECK(cudaEventCreate(&backward_done_));
  }
  clear_marks();
  stats_.buckets = static_cast<int>(buckets_.size());
}

GradBuckets::~GradBuckets() {
  try {
    wait_all();
  } catch (const std::exception&) {
    // Already reported by whoever saw the failure first; a destructor must not throw.
  }
  if (backward_done_ != nullptr) cudaEventDestroy(backward_done_);
  if (!wire_.empty()) cudaFree(wire_.data);
}

cudaStream_t GradBuckets::compute_stream() const {
  return compute_stream_ ? compute_stream_ : cuda::current_stream();
}

int GradBuckets::bucket_of(int64_t element) const {
  if (element < 0 || element >= total_) {
    throw CommError("GradBuckets: element " + std::to_string(element) +
                    " is outside the gradient buffer of " + std::to_string(total_));
  }
  auto after = std::upper_bound(buckets_.begin(), buckets_.end(), element,
                                [](int64_t e, const ElementRange& b) { return e < b.begin; });
  return static_cast<int>(after - buckets_.begin()) - 1;
}

void GradBuckets::mark_ready(int64_t offset, int64_t count) {
  const int64_t end = offset + count;
  if (offset < 0 || count < 0 || end > total_) {
    throw CommError("GradBuckets::mark_ready: elements " + range_text(offset, end) +
                    " are outside the gradient buffer of " + std::to_string(total_));
  }
  if (count == 0) return;
  auto next = marked_.upper_bound(offset);
  auto clash = marked_.end();
  if (next != marked_.begin() && std::prev(next)->second > offset) clash = std::prev(next);
  if (clash == marked_.end() && next != marked_.end() && next->first < end) clash = next;
  if (clash != marked_.end()) {
    throw CommError("GradBuckets::mark_ready: elements " + range_text(offset, end) + " overlap " +
                    range_text(clash->first, clash->second) +
                    ", already marked ready this step (each gradient is marked once per step; "
                    "with accumulation, only in the last micro-batch)");
  }
  marked_.emplace(offset, end);
  marked_elements_ += count;

  for_each_overlap(offset, end, [&](int b, int64_t overlap) { remaining_[b] -= overlap; });
  // Buckets start strictly in index order, as soon as every bucket before them has started: every
  // rank then issues the same collectives in the same order even if backward marks parameters in
  // a different order on different ranks (MPI and NCCL both require that order to match).
  // Each bucket is its own collective, even when several become startable together: NCCL needs
  // the same grouping on every rank, and ranks that mark in different orders would group
  // differently (seen on 2 H200s: buckets 1-3 grouped on one rank, 1-5 on the other, hung).
  while (next_to_start_ < static_cast<int>(buckets_.size()) && remaining_[next_to_start_] == 0) {
    start_buckets(next_to_start_, next_to_start_);
    ++next_to_start_;
  }
  poll();
}

int GradBuckets::leading_buckets_filled(const std::vector<ElementRange>& ranges) const {
  std::vector<int64_t> covered(buckets_.size(), 0);
  for (const ElementRange& r : ranges) {
    if (r.size() <= 0 || r.begin >= total_ || r.end <= 0) continue;
    for_each_overlap(std::max<int64_t>(r.begin, 0), r.end,
                     [&](int b, int64_t overlap) { covered[b] += overlap; });
  }
  int filled = 0;
  while (filled < static_cast<int>(buckets_.size()) && covered[filled] >= buckets_[filled].size())
    ++filled;
  return filled;
}

void GradBuckets::mark_all_ready() {
  std::vector<ElementRange> gaps;
  int64_t at = 0;
  for (const auto& [begin, end] : marked_) {
    if (begin > at) gaps.push_back({at, begin});
    at = end;
  }
  if (at < total_) gaps.push_back({at, total_});
  for (const ElementRange& gap : gaps) mark_ready(gap.begin, gap.size());
}

void GradBuckets::start_buckets(int first, int last) {
  std::vector<Tensor> views;
  int64_t bytes = 0;
  for (int b = first; b <= last; ++b) {
    const ElementRange& r = buckets_[b];
    Tensor grads = grads_.rows(r.begin, r.end);
    if (wire_.empty()) {
      views.push_back(grads);
    } else {  // enqueued behind the backward work that produced these gradients
      cuda::StreamScope scope(compute_stream());
      Tensor wire = wire_.rows(r.begin, r.end);
      convert_tensor(grads, wire);
      views.push_back(wire);
    }
    bytes += r.size() * static_cast<int64_t>(dtype_size(views.back().dtype));
  }
  std::string label =
      first == last ? "all-reduce of bucket " + std::to_string(first)
                    : "all-reduce of buckets " + std::to_string(first) + "-" + std::to_string(last);
  in_flight_.push_back(
      {comm_.start_all_reduce_sum(views, std::move(label), compute_stream_), bytes});
}

void GradBuckets::poll() {
  // One query per mark: requests finish in start order (one stream; MPI progresses them all on
  // any test), so only the oldest unfinished one is asked.
  while (polled_done_ < in_flight_.size() && in_flight_[polled_done_].request->test()) {
    ++polled_done_;
  }
}

void GradBuckets::wait_all() {
  for (InFlight& f : in_flight_) f.request->wait();
}

void GradBuckets::clear_marks() {
  remaining_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) remaining_[b] = buckets_[b].size();
  marked_.clear();
  marked_elements_ = 0;
  next_to_start_ = 0;
  in_flight_.clear();
  polled_done_ = 0;
}

void GradBuckets::throw_unmarked() const {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (remaining_[b] == 0) continue;
    // The first element of the bucket that no mark covers: marks are disjoint and sorted.
    int64_t first = buckets_[b].begin;
    auto it = marked_.upper_bound(first);
    if (it != marked_.begin() && std::prev(it)->second > first) first = std::prev(it)->second;
    while (it != marked_.end() && it->first == first) first = (it++)->second;
    throw CommError("GradBuckets::finish: bucket " + std::to_string(b) + " (elements " +
                    range_text(buckets_[b].begin, buckets_[b].end) + ") still has " +
                    std::to_string(remaining_[b]) + " elements never marked ready, the first " +
                    std::to_string(first) + ": every gradient must be marked once per step");
  }
  throw CommError("GradBuckets::finish: internal error, no unmarked bucket found");
}

void GradBuckets::finish() {
  if (marked_elements_ != total_) throw_unmarked();
  using Clock = std::chrono::steady_clock;
  const bool on_gpu = grads_.device == Device::cuda && !in_flight_.empty() &&
                      in_flight_.front().request->done_event() != nullptr;
  if (on_gpu) {
    cudaStream_t compute = compute_stream();
    CUDA_CHECK(cudaEventRecord(backward_done_, compute));
  }
  const Clock::time_point start = Clock::now();
  wait_all();
  GradExchangeStats s;
  s.buckets = static_cast<int>(buckets_.size());
  s.finish_wait_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  s.exposed_seconds = s.finish_wait_seconds;
  if (on_gpu) {
    CUDA_CHECK(cudaEventSynchronize(backward_done_));
    float latest_ms = 0;
    for (const InFlight& f : in_flight_) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, backward_done_, f.request->done_event()));
      latest_ms = std::max(latest_ms, ms);
    }
    s.exposed_seconds = latest_ms * 1e-3;
  }
  for (const InFlight& f : in_flight_) {
    s.collectives += 1;
    s.bytes += f.bytes;
    s.comm_seconds += f.request->seconds();
  }
  if (s.comm_seconds > 0) {
    const int n = comm_.size();
    s.algbw_gbps = static_cast<double>(s.bytes) / s.comm_seconds / 1e9;
    s.busbw_gbps = s.algbw_gbps * 2.0 * (n - 1) / n;
  }
  stats_ = s;
  if (!wire_.empty() && total_ > 0) {  // the sums back into the fp32 buffer, before the optimizer
    cuda::StreamScope scope(compute_stream());
    convert_tensor(wire_, grads_);
  }
  clear_marks();
}

void GradBuckets::reset() {
  wait_all();
  clear_marks();
}

}  // namespace nmt
