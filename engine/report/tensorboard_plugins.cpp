// The text and hparams plugins' summaries. Messages and field numbers (protobuf wire format by
// hand, engine/report/protobuf_wire.h):
//   Summary.Value (tensorflow/core/framework/summary.proto): tag = 1, metadata = 9, tensor = 8
//   SummaryMetadata: plugin_data = 1 (PluginData: plugin_name = 1, content = 2 bytes)
//   TensorProto (tensor.proto): dtype = 1 (DT_FLOAT 1, DT_STRING 7), tensor_shape = 2
//     (TensorShapeProto: dim = 2, Dim: size = 1), string_val = 8
//   HParamsPluginData (tensorboard/plugins/hparams/plugin_data.proto): version = 1 (0),
//     experiment = 2, session_start_info = 3
//   Experiment (hparams/api.proto): time_created_secs = 3, hparam_infos = 4, metric_infos = 5
//   HParamInfo: name = 1, type = 4 (DATA_TYPE_STRING 1, _BOOL 2, _FLOAT64 3)
//   MetricInfo: name = 1 (MetricName: group = 1, tag = 2), dataset_type = 5 (VALIDATION 2)
//   SessionStartInfo: hparams = 1 (map<string, google.protobuf.Value>: entries {key = 1,
//     value = 2}), start_time_secs = 5
//   google.protobuf.Value: number_value = 2, string_value = 3, bool_value = 4
// The text plugin's content (TextPluginData, version 0) encodes to nothing, so we write none.
#include "engine/report/tensorboard_plugins.h"

#include <cstring>

#include "data/bleu_text.h"
#include "engine/report/protobuf_wire.h"

namespace nmt {
namespace {

using protobuf_wire::put_bytes;
using protobuf_wire::put_double;
using protobuf_wire::put_varint_field;

constexpr uint64_t kDtFloat = 1, kDtString = 7;
constexpr uint64_t kDataTypeString = 1, kDataTypeBool = 2, kDataTypeFloat64 = 3;
constexpr uint64_t kDatasetValidation = 2;

std::string markdown_cell(const std::string& text) {
  std::string cell;
  for (char c : valid_utf8(text)) {
    if (c != '\0' && std::strchr("\\|`*_[]", c) != nullptr) {
      cell += '\\';  // Markdown's backslash escape (\| inside a table cell)
      cell += c;
    } else if (c == '<') {
      cell += "&lt;";  // raw HTML would be rendered, or removed by the dashboard's sanitizer
    } else if (c == '&') {
      cell += "&amp;";  // so that a literal "&lt;" stays literal
    } else if (c == '\n' || c == '\r' || c == '\t') {
      cell += ' ';  // a table row is one line
    } else {
      cell += c;
    }
  }
  return cell;
}

void flatten(const nlohmann::json& node, const std::string& path, std::vector<HParam>& out) {
  if (node.is_object()) {
    for (const auto& [key, child] : node.items())
      flatten(child, path.empty() ? key : path + "." + key, out);
    return;
  }
  if (path.empty() || node.is_null()) return;
  HParam h;
  h.name = path;
  if (node.is_number()) {
    h.number = node.get<double>();
  } else if (node.is_boolean()) {
    h.kind = HParam::Kind::boolean;
    h.boolean = node.get<bool>();
  } else {
    h.kind = HParam::Kind::text;
    h.text = node.is_string() ? node.get<std::string>()
                              : node.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  out.push_back(std::move(h));
}

// SummaryMetadata {plugin_data {plugin_name, content}}.
std::string plugin_metadata(const std::string& plugin_name, const std::string& content) {
  std::string plugin_data;
  put_bytes(plugin_data, 1, plugin_name);
  if (!content.empty()) put_bytes(plugin_data, 2, content);
  std::string metadata;
  put_bytes(metadata, 1, plugin_data);
  return metadata;
}

// The hparams plugin's Summary.Value: its data in the metadata, an empty float tensor as value.
std::string hparams_value(const std::string& tag, const std::string& plugin_data) {
  std::string dim;
  put_varint_field(dim, 1, 0);
  std::string shape;
  put_bytes(shape, 2, dim);
  std::string tensor;
  put_varint_field(tensor, 1, kDtFloat);
  put_bytes(tensor, 2, shape);
  std::string value;
  put_bytes(value, 1, tag);
  put_bytes(value, 9, plugin_metadata("hparams", plugin_data));
  put_bytes(value, 8, tensor);
  return value;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  std::u32string decoded;
  size_t bad = 0;
  while (!bleu_text::try_decode_utf8(text, decoded, bad)) {
    out.append(text.substr(0, bad));
    out += "\xEF\xBF\xBD";  // U+FFFD for the offending byte; decoding resumes after it
    text.remove_prefix(bad + 1);
  }
  out.append(text);
  return out;
}

std::string samples_markdown(const std::vector<std::vector<std::string>>& samples) {
  if (samples.empty()) return "";
  std::string table = "| source | reference | prediction |\n|---|---|---|\n";
  for (const std::vector<std::string>& sample : samples) {
    table += '|';
    for (size_t i = 0; i < 3; ++i) {
      table += ' ';
      if (i < sample.size()) table += markdown_cell(sample[i]);
      table += " |";
    }
    table += '\n';
  }
  return table;
}

std::vector<HParam> hparams_from_json(const nlohmann::json& config) {
  std::vector<HParam> out;
  if (config.is_object()) flatten(config, "", out);
  return out;
}

namespace tensorboard_detail {

std::string text_summary_value(const std::string& tag, const std::string& text) {
  std::string tensor;
  put_varint_field(tensor, 1, kDtString);
  put_bytes(tensor, 2, "");  // shape []: a scalar string
  put_bytes(tensor, 8, valid_utf8(text));
  std::string value;
  put_bytes(value, 1, valid_utf8(tag));
  put_bytes(value, 9, plugin_metadata("text", ""));
  put_bytes(value, 8, tensor);
  return value;
}

std::string hparams_experiment_value(const std::vector<HParam>& hparams,
                                     const std::vector<std::string>& metric_tags,
                                     double wall_time) {
  std::string experiment;
  put_double(experiment, 3, wall_time);
  for (const HParam& h : hparams) {
    std::string info;
    put_bytes(info, 1, valid_utf8(h.name));
    put_varint_field(info, 4,
                     h.kind == HParam::Kind::number    ? kDataTypeFloat64
                     : h.kind == HParam::Kind::boolean ? kDataTypeBool
                                                       : kDataTypeString);
    put_bytes(experiment, 4, info);
  }
  for (const std::string& tag : metric_tags) {
    std::string name;  // group "": the scalar lives in this run's own directory
    put_bytes(name, 2, valid_utf8(tag));
    std::string info;
    put_bytes(info, 1, name);
    put_varint_field(info, 5, kDatasetValidation);
    put_bytes(experiment, 5, info);
  }
  std::string plugin_data;
  put_bytes(plugin_data, 2, experiment);
  return hparams_value("_hparams_/experiment", plugin_data);
}

std::string hparams_session_start_value(const std::vector<HParam>& hparams, double wall_time) {
  std::string start;
  for (const HParam& h : hparams) {
    std::string value;  // google.protobuf.Value: a oneof, so false and 0 are written too
    if (h.kind == HParam::Kind::number)
      put_double(value, 2, h.number);
    else if (h.kind == HParam::Kind::boolean)
      put_varint_field(value, 4, h.boolean ? 1 : 0);
    else
      put_bytes(value, 3, valid_utf8(h.text));
    std::string entry;
    put_bytes(entry, 1, valid_utf8(h.name));
    put_bytes(entry, 2, value);
    put_bytes(start, 1, entry);
  }
  put_double(start, 5, wall_time);
  std::string plugin_data;
  put_bytes(plugin_data, 3, start);
  return hparams_value("_hparams_/session_start_info", plugin_data);
}

}  // namespace tensorboard_detail
}  // namespace nmt
