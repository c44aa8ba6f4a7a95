// score_pairs: checkpoint -> model, lines -> ids -> one padded batch -> evaluate and per-sentence
// last-position logits.
#include "apps/nmt-score/score.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "data/batch.h"
#include "data/special_ids.h"
#include "data/vocab.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/decode/decode_translate.h"
#include "engine/model/transformer.h"
#include "kernels/elementwise.h"

namespace nmt {

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot open " + path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  if (in.bad()) throw std::invalid_argument("cannot read " + path);
  return lines;
}

std::string where(const std::string& path, size_t line) {
  return path + " line " + std::to_string(line + 1);
}

// The vocabulary size the checkpoint's weights were trained with (synthetic data has no file).
int64_t checkpoint_vocab_size(const std::string& checkpoint) {
  SafetensorsReader reader(checkpoint + "/model.safetensors");
  const SafetensorsTensorInfo* table = reader.find("encoder.embed_tokens.weight");
  if (!table || table->shape.size() != 2)
    throw CheckpointError(checkpoint +
                          "/model.safetensors: no [vocab, d_model] "
                          "encoder.embed_tokens.weight");
  return table->shape[0];
}

std::vector<float> to_host(const Tensor& logits) {  // [1, vocab] f32, either device
  std::vector<float> host(static_cast<size_t>(logits.numel()));
  Tensor dst(host.data(), DType::f32, Device::cpu, {logits.dim(0), logits.dim(1)});
  copy_tensor(logits, dst);
  return host;
}

}  // namespace

std::vector<std::vector<int32_t>> read_id_lines(const std::string& path, int64_t vocab_size) {
  std::vector<std::string> lines = read_lines(path);
  std::vector<std::vector<int32_t>> out(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const char* p = lines[i].data();
    const char* end = p + lines[i].size();
    while (p != end) {
      if (*p == ' ' || *p == '\t') {
        ++p;
        continue;
      }
      int32_t id = 0;
      auto [next, error] = std::from_chars(p, end, id);
      if (error != std::errc() || (next != end && *next != ' ' && *next != '\t'))
        throw std::invalid_argument(where(path, i) + ": \"" + lines[i] +
                                    "\" is not a list of token ids");
      if (id < 0 || id >= vocab_size || id == kPadId || id == kBosId || id == kEosId)
        throw std::invalid_argument(where(path, i) + ": id " + std::to_string(id) +
                                    " is not a regular token id of a vocabulary of " +
                                    std::to_string(vocab_size) + " (pad, bos and eos are added)");
      out[i].push_back(id);
      p = next;
    }
  }
  return out;
}

std::vector<std::vector<int32_t>> read_text_lines(const std::string& path,
                                                  const std::string& vocab_file) {
  std::unique_ptr<Vocab> vocab = load_vocab(vocab_file);
  std::vector<std::string> lines = read_lines(path);
  std::vector<std::vector<int32_t>> out(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) vocab->encode(lines[i], out[i]);
  return out;
}

nlohmann::json score_pairs(const ScoreOptions& options) {
  LoadedCheckpoint ckpt = read_checkpoint_state(options.checkpoint);
  const int64_t vocab_size = checkpoint_vocab_size(options.checkpoint);
  std::vector<std::vector<int32_t>> sources, targets;
  if (options.ids) {
    sources = read_id_lines(options.source_file, vocab_size);
    targets = read_id_lines(options.target_file, vocab_size);
  } else {
    std::string vocab_file =
        options.vocab.empty() ? checkpoint_vocabulary_file(ckpt) : options.vocab;
    if (vocab_file.empty())
      throw std::invalid_argument("checkpoint " + options.checkpoint +
                                  " records no vocabulary (synthetic data): pass --ids or --vocab");
    check_checkpoint_vocabulary(ckpt.state, vocab_file);
    sources = read_text_lines(options.source_file, vocab_file);
    targets = read_text_lines(options.target_file, vocab_file);
  }
  if (sources.size() != targets.size())
    throw std::invalid_argument(options.source_file + " has " + std::to_string(sources.size()) +
                                " lines but " + options.target_file + " has " +
                                std::to_string(targets.size()));
  if (sources.empty()) throw std::invalid_argument(options.source_file + ": no lines");
  const int64_t max_positions = ckpt.config.model.max_positions;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].empty())
      throw std::invalid_argument(where(options.source_file, i) + ": empty source");
    if (static_cast<int64_t>(sources[i].size()) > max_positions ||
        static_cast<int64_t>(targets[i].size()) + 1 > max_positions)
      throw std::invalid_argument(
          where(options.source_file, i) +
          ": longer than model.max_positions = " + std::to_string(max_positions) + " tokens");
  }

  std::vector<int64_t> order(sources.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  Batch batch = make_batch(sources, targets, order, kPadMultiple);
  const int64_t max_len = std::max(batch.src_len, batch.tgt_len);
  Device device = options.device.value_or(default_decode_device());
  Transformer model(model_shape_from(ckpt.config.model, vocab_size), device,
                    batch.sentences * max_len, max_len, ModelPlan{/*training=*/false});
  load_model_weights(options.checkpoint, model.params());
  LossSums sums = model.evaluate(batch, /*label_smoothing=*/0.0f);

  nlohmann::json last_logits = nlohmann::json::array(), eos_nll = nlohmann::json::array();
  for (size_t i = 0; i < sources.size(); ++i) {
    Batch one = make_batch({sources[i]}, {targets[i]}, {0}, kPadMultiple);
    Tensor memory = model.encode_sources(one);
    std::vector<int32_t> prefix = {kBosId};
    prefix.insert(prefix.end(), targets[i].begin(), targets[i].end());
    const int64_t prefix_len = static_cast<int64_t>(prefix.size());
    std::vector<float> logits = to_host(
        model.decode_last_logits(memory, one.src_lengths, one.src_len, prefix, 1, prefix_len));
    // -log softmax(logits)[eos], in double: the eos term of this sentence's loss.
    double max_logit = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
    eos_nll.push_back(max_logit + std::log(sum) - static_cast<double>(logits[kEosId]));
    last_logits.push_back(logits);
  }
  return {{"checkpoint", options.checkpoint},
          {"step", ckpt.state.step},
          {"device", device_name(device)},
          {"vocab_size", vocab_size},
          {"sentences", batch.sentences},
          {"src_len", batch.src_len},
          {"tgt_len", batch.tgt_len},
          {"loss", sums.loss},
          {"nll", sums.nll},
          {"tokens", sums.tokens},
          {"correct", sums.correct},
          {"src_ids", sources},
          {"tgt_ids", targets},
          {"last_logits", last_logits},
          {"eos_nll", eos_nll}};
}

}  // namespace nmt
