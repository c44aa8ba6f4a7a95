"""Oracle for the TensorBoard tests: loads a TensorBoard log directory with the tensorboard
package and writes what it reads as JSON:
  scalars     {tag: [[step, value, wall_time], ...]}          (EventAccumulator)
  plugins     {plugin name: [tags with its metadata]}         (EventAccumulator)
  texts       {tag: [[step, string], ...]} of the text plugin's tags
  text_html   {tag: [html, ...]}: each text as the text dashboard renders it
  hparams     {"experiment": ..., "session_start_info": ...}: the hparams plugin's data, parsed
              by the plugin's own metadata module (protobuf JSON names)
  dashboard   {"sessions": [{"hparams": {...}, "metrics": {tag: value}}]}: what the hparams
              dashboard lists, from the plugin's list_session_groups handler

usage: read_events.py LOG_DIR OUT_JSON
"""
import json
import sys

try:
    from google.protobuf import json_format
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2
    from tensorboard.plugins.hparams import backend_context
    from tensorboard.plugins.hparams import list_session_groups
    from tensorboard.plugins.hparams import metadata as hparams_metadata
    from tensorboard.plugins.text import text_plugin
    from tensorboard.util import tensor_util
except ImportError as error:
    print(f"{error.name or error} is not installed for python3: run scripts/install-deps.sh")
    sys.exit(3)


def plugin_contents(acc, plugin_name):
    """{tag: content} of a plugin's summaries; {} when it has none."""
    try:
        return acc.PluginTagToContent(plugin_name)
    except KeyError:
        return {}


def read_hparams(acc):
    contents = plugin_contents(acc, "hparams")
    parsed = {}
    if hparams_metadata.EXPERIMENT_TAG in contents:
        experiment = hparams_metadata.parse_experiment_plugin_data(
            contents[hparams_metadata.EXPERIMENT_TAG])
        parsed["experiment"] = json_format.MessageToDict(experiment)
    if hparams_metadata.SESSION_START_INFO_TAG in contents:
        start = hparams_metadata.parse_session_start_info_plugin_data(
            contents[hparams_metadata.SESSION_START_INFO_TAG])
        parsed["session_start_info"] = json_format.MessageToDict(start)
    return parsed


def dashboard_sessions(log_dir):
    """The hparams dashboard's session list, as TensorBoard's server computes it."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(log_dir)
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, log_dir)
    tb_context = base_plugin.TBContext(logdir=log_dir, data_provider=provider,
                                       multiplexer=multiplexer)
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=100, allowed_statuses=[
            api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE,
            api_pb2.STATUS_RUNNING])
    response = list_session_groups.Handler(context.RequestContext(),
                                           backend_context.Context(tb_context), "", request).run()
    sessions = []
    for group in response.session_groups:
        hparams = json_format.MessageToDict(group)["hparams"] if group.hparams else {}
        for session in group.sessions:
            sessions.append({
                "name": session.name,
                "hparams": hparams,
                "metrics": {m.name.tag: m.value for m in session.metric_values},
            })
    return {"sessions": sessions}


def main():
    log_dir, out = sys.argv[1], sys.argv[2]
    acc = event_accumulator.EventAccumulator(
        log_dir, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    plugins = {name: sorted(plugin_contents(acc, name)) for name in ("text", "hparams")}
    texts, text_html = {}, {}
    for tag in plugins.get("text", []):
        events = acc.Tensors(tag)
        texts[tag] = [[e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode("utf-8")]
                      for e in events]
        text_html[tag] = [text_plugin.text_array_to_html(tensor_util.make_ndarray(e.tensor_proto),
                                                         enable_markdown=True) for e in events]
    answer = {
        "file_version": getattr(acc, "file_version", None),
        "scalars": {
            tag: [[e.step, e.value, e.wall_time] for e in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"]
        },
        "plugins": plugins,
        "texts": texts,
        "text_html": text_html,
        "hparams": read_hparams(acc),
        "dashboard": dashboard_sessions(log_dir) if plugins["hparams"] else {},
    }
    with open(out, "w") as f:
        json.dump(answer, f)


if __name__ == "__main__":
    main()
