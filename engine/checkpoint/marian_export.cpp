// export_marian: checkpoint tensors renamed and laid out as Marian's model.npz names them, the
// exact position table, model.yml, vocab.yml, the vocabulary file and export.json, staged in a
// temporary directory and renamed into place.
#include "engine/checkpoint/marian_export.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "data/vocab.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_layout.h"
#include "engine/checkpoint/npz_writer.h"
#include "engine/checkpoint/safetensors.h"
#include "kernels/sinusoid.h"

namespace nmt {

namespace fs = std::filesystem;

namespace {

// Reads our tensors (aliases resolved) and collects the arrays of model.npz, remembering which
// stored tensors were used so that nothing is silently left behind.
class MarianTensors {
 public:
  MarianTensors(const SafetensorsReader& reader, std::map<std::string, std::string> aliases)
      : reader_(reader), aliases_(std::move(aliases)) {}

  // Ours [rows, cols] (torch.nn.Linear's [out, in]) -> Marian's [cols, rows] ([in, out]).
  void transposed(const std::string& ours, const std::string& marian, int64_t rows, int64_t cols) {
    std::vector<float> w = read(ours, {rows, cols});
    std::vector<float> t(w.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = w[r * cols + c];
    add(marian, {cols, rows}, std::move(t));
  }
  // A vector [n] stored as Marian's row [1, n] (biases, layer norm scales and biases).
  void row(const std::string& ours, const std::string& marian, int64_t n) {
    add(marian, {1, n}, read(ours, {n}));
  }
  void same(const std::string& ours, const std::string& marian, std::vector<int64_t> shape) {
    add(marian, shape, read(ours, shape));
  }
  // values: [prod(shape)] f32, kept alive (and unmoved) until the archive is written.
  void add(const std::string& marian, std::vector<int64_t> shape, std::vector<float> values) {
    storage_.push_back(std::move(values));
    arrays_.push_back({marian, "<f4", std::move(shape), storage_.back().data()});
  }
  void add_bytes(const std::string& marian, const std::string& bytes) {
    bytes_.push_back(bytes);
    arrays_.push_back({marian, "|i1", {static_cast<int64_t>(bytes.size())}, bytes_.back().data()});
  }
  // Stored tensors no mapping read: an error, since the export would lose them.
  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const SafetensorsTensorInfo& t : reader_.tensors())
      if (!used_.count(t.name)) out.push_back(t.name + " " + shape_to_string(t.shape));
    return out;
  }
  const std::vector<NpyArray>& arrays() const { return arrays_; }

 private:
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) {
    std::string stored = name;
    if (!reader_.find(name))
      if (auto a = aliases_.find(name); a != aliases_.end()) stored = a->second;
    std::vector<float> out;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out.resize(static_cast<size_t>(n));
    reader_.read_f32(stored, shape, out.data());  // names the file and tensor when absent/wrong
    used_.insert(stored);
    return out;
  }

  const SafetensorsReader& reader_;
  std::map<std::string, std::string> aliases_;
  std::set<std::string> used_;
  std::deque<std::vector<float>> storage_;
  std::deque<std::string> bytes_;
  std::vector<NpyArray> arrays_;
};

void export_attention(MarianTensors& t, const std::string& ours, const std::string& marian,
                      int64_t d) {
  const std::pair<const char*, const char*> projections[] = {
      {"q_proj", "q"}, {"k_proj", "k"}, {"v_proj", "v"}, {"out_proj", "o"}};
  for (const auto& [name, letter] : projections) {
    t.transposed(ours + "." + name + ".weight", marian + "_W" + letter, d, d);
    t.row(ours + "." + name + ".bias", marian + "_b" + letter, d);
  }
}

// Our "<name>.weight/.bias" norm as Marian's "<scope>_ln_scale/_ln_bias", "_pre" added for a norm
// applied before its sublayer (Marian's naming; the converter reads either).
void export_norm(MarianTensors& t, const std::string& ours, const std::string& scope, int64_t d,
                 bool pre) {
  std::string suffix = pre ? "_pre" : "";
  t.row(ours + ".weight", scope + "_ln_scale" + suffix, d);
  t.row(ours + ".bias", scope + "_ln_bias" + suffix, d);
}

void export_ffn(MarianTensors& t, const std::string& ours, const std::string& marian, int64_t d,
                int64_t f, bool pre) {
  t.transposed(ours + ".fc1.weight", marian + "_ffn_W1", f, d);
  t.row(ours + ".fc1.bias", marian + "_ffn_b1", f);
  t.transposed(ours + ".fc2.weight", marian + "_ffn_W2", d, f);
  t.row(ours + ".fc2.bias", marian + "_ffn_b2", d);
  export_norm(t, ours + ".final_layer_norm", marian + "_ffn_ffn", d, pre);
}

// Marian's model.yml: the options CTranslate2's converter reads, plus the shape Marian records.
std::string marian_model_yml(const ModelConfig& m, int64_t vocab) {
  bool pre = m.norm == NormPosition::pre;
  std::string y;
  auto line = [&y](const std::string& key, const std::string& value) {
    y += key + ": " + value + "\n";
  };
  line("type", "transformer");
  line("dim-emb", std::to_string(m.d_model));
  std::string vocabs = std::to_string(vocab);
  line("dim-vocabs", std::string("[").append(vocabs).append(", ").append(vocabs).append("]"));
  line("enc-depth", std::to_string(m.encoder_layers));
  line("dec-depth", std::to_string(m.decoder_layers));
  line("transformer-heads", std::to_string(m.num_heads));
  line("transformer-dim-ffn", std::to_string(m.ffn_dim));
  line("transformer-ffn-depth", "2");
  line("transformer-ffn-activation", "relu");
  line("transformer-preprocess", pre ? "\"n\"" : "\"\"");
  line("transformer-postprocess", pre ? "\"da\"" : "\"dan\"");
  line("transformer-postprocess-top", pre ? "\"n\"" : "\"\"");
  line("transformer-postprocess-emb", "\"d\"");
  line("transformer-decoder-autoreg", "self-attention");
  line("transformer-no-projection", "false");
  line("transformer-guided-alignment-layer", "last");
  line("transformer-train-position-embeddings", "false");
  line("tied-embeddings-all", m.shared_embeddings ? "true" : "false");
  line("tied-embeddings", m.shared_embeddings ? "true" : "false");
  line("max-length", std::to_string(m.max_positions));
  return y;
}

std::string vocabulary_file(const MarianExportOptions& o, const LoadedCheckpoint& ck) {
  if (!o.vocab.empty()) return o.vocab;
  const std::string file = checkpoint_vocabulary_file(ck);
  if (file.empty())
    throw std::invalid_argument(
        "checkpoint " + o.checkpoint +
        " records no vocabulary (trained on synthetic data?): pass --vocab");
  if (!fs::exists(file))
    throw std::invalid_argument("vocabulary " + file + " (recorded in " + o.checkpoint +
                                "/state.json) does not exist: pass --vocab PATH");
  return file;
}

void write_text(const std::string& path, const std::string& text) {
  DurableFile file(path);
  file.write(text.data(), text.size());
  file.sync_and_close();
}

}  // namespace

std::string marian_vocab_line(const std::string& piece, int64_t id) {
  if (piece.empty() || piece.find_first_of("\r\n") != std::string::npos || piece.starts_with("\\x"))
    throw std::invalid_argument("vocabulary piece " + std::to_string(id) +
                                " cannot be written to vocab.yml (empty, a line break, or a "
                                "leading \\x that CTranslate2's reader takes for an escape)");
  std::string quoted = "\"";
  for (char c : piece) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\": " + std::to_string(id) + "\n";
}

MarianExportResult export_marian(const MarianExportOptions& o) {
  if (o.checkpoint.empty()) throw std::invalid_argument("--checkpoint: not given");
  if (o.out.empty()) throw std::invalid_argument("--out: not given");
  std::error_code ec;
  if (fs::exists(o.out, ec))
    throw std::invalid_argument("--out " + o.out + " exists: export into a new directory");
  validate_checkpoint(o.checkpoint);  // every file's size and CRC32C before any tensor is used
  LoadedCheckpoint ck = read_checkpoint_state(o.checkpoint);
  const ModelConfig& m = ck.config.model;
  std::string vocab_path = vocabulary_file(o, ck);
  check_checkpoint_vocabulary(ck.state, vocab_path);
  std::unique_ptr<Vocab> vocab = load_vocab(vocab_path);
  const int64_t v = vocab->size(), d = m.d_model, f = m.ffn_dim;
  const bool pre = m.norm == NormPosition::pre;

  SafetensorsReader reader(o.checkpoint + "/" + checkpoint_layout::kModelFile);
  MarianTensors t(reader, checkpoint_layout::parse_aliases(reader.metadata(), reader.path()));
  if (m.shared_embeddings) {
    t.same("encoder.embed_tokens.weight", "Wemb", {v, d});
  } else {
    t.same("encoder.embed_tokens.weight", "encoder_Wemb", {v, d});
    t.same("decoder.embed_tokens.weight", "decoder_Wemb", {v, d});
    // "_Wt": already [vocab, d_model], the layout the converter wants.
    t.same("decoder.output_projection.weight", "decoder_ff_logit_out_Wt", {v, d});
  }
  // Our sinusoid exactly (kernels/sinusoid.h): the converter's built-in table differs.
  std::vector<float> pos(static_cast<size_t>(m.max_positions * d));
  for (int64_t p = 0; p < m.max_positions; ++p)
    for (int64_t i = 0; i < d; ++i) pos[p * d + i] = sinusoid_value(p, i, d);
  t.add("Wpos", {m.max_positions, d}, std::move(pos));
  for (int64_t i = 0; i < m.encoder_layers; ++i) {
    std::string ours = "encoder.layers." + std::to_string(i);
    std::string marian = "encoder_l" + std::to_string(i + 1);
    export_attention(t, ours + ".self_attn", marian + "_self", d);
    export_norm(t, ours + ".self_attn_layer_norm", marian + "_self_Wo", d, pre);
    export_ffn(t, ours, marian, d, f, pre);
  }
  for (int64_t i = 0; i < m.decoder_layers; ++i) {
    std::string ours = "decoder.layers." + std::to_string(i);
    std::string marian = "decoder_l" + std::to_string(i + 1);
    export_attention(t, ours + ".self_attn", marian + "_self", d);
    export_norm(t, ours + ".self_attn_layer_norm", marian + "_self_Wo", d, pre);
    export_attention(t, ours + ".encoder_attn", marian + "_context", d);
    export_norm(t, ours + ".encoder_attn_layer_norm", marian + "_context_Wo", d, pre);
    export_ffn(t, ours, marian, d, f, pre);
  }
  if (pre) {
    export_norm(t, "encoder.layer_norm", "encoder_top", d, false);
    export_norm(t, "decoder.layer_norm", "decoder_top", d, false);
  }
  if (std::vector<std::string> left = t.unused(); !left.empty()) {
    std::string list;
    for (const std::string& name : left) list += "\n  " + name;
    throw CheckpointError(reader.path() + " has tensors the Marian export does not map:" + list);
  }
  std::string yml = marian_model_yml(m, v);
  t.add_bytes("special:model.yml", yml + std::string(1, '\0'));  // Marian's NUL-terminated text

  std::string vocab_yml;
  for (int64_t id = 0; id < v; ++id)
    vocab_yml += marian_vocab_line(vocab->piece(static_cast<int32_t>(id)), id);

  const bool spm = vocab->kind() == "sentencepiece";
  std::string vocab_copy = spm ? "sentencepiece.model" : fs::path(vocab_path).filename().string();
  nlohmann::json info = {
      {"format", "nmt-export"},
      {"format_version", 1},
      {"target", "marian-npz"},
      {"checkpoint", o.checkpoint},
      {"step", ck.state.step},
      {"model", to_json(ck.config)["model"]},
      {"vocabulary", {{"file", vocab_copy}, {"kind", vocab->kind()}, {"size", v}}},
      // What a CTranslate2 conversion must set for this model (scripts/ct2_nmt_converter.py).
      {"ctranslate2",
       {{"layer_norm_epsilon", m.layernorm_eps},
        {"add_source_eos", false},
        {"decoder_start_token", "<s>"},
        {"decoder_start_from_zero_embedding", false},
        {"max_positions", m.max_positions}}}};

  fs::path out(o.out);
  fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  std::string staged = o.out + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(staged, ec);
  if (!fs::create_directory(staged, ec) || ec)
    throw CheckpointError("cannot create " + staged + ": " +
                          (ec ? ec.message() : std::string("it exists")));
  MarianExportResult result;
  try {
    write_npz(staged + "/" + kMarianModelFile, t.arrays());
    write_text(staged + "/" + kMarianVocabFile, vocab_yml);
    write_text(staged + "/" + vocab_copy, read_text_file(vocab_path));
    write_text(staged + "/" + kExportInfoFile, info.dump(2) + "\n");
    fsync_directory(staged);
    if (std::rename(staged.c_str(), o.out.c_str()) != 0)
      throw CheckpointError("cannot rename " + staged + " to " + o.out + ": " +
                            std::strerror(errno));
    fsync_directory(parent.string());
  } catch (...) {
    fs::remove_all(staged, ec);
    throw;
  }
  result.files = {kMarianModelFile, kMarianVocabFile, vocab_copy, kExportInfoFile};
  result.tensors = static_cast<int64_t>(t.arrays().size());
  result.step = ck.state.step;
  return result;
}

}  // namespace nmt
