"""A TensorBoard event file written in the calling thread.

torch's ``SummaryWriter`` (and tensorboard's ``EventFileWriter``) hand every event to a
writer thread of their own. mptrain's parent forks its workers after the trackers are open
(and again at every restart), and a fork while another thread holds a lock leaves that
lock held forever in the child: so events go through tensorboard's synchronous
``RecordWriter`` here, one flush per round, and no thread is ever started.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

# TensorBoard's hparams plugin (tensorboard.plugins.hparams.metadata): the tags it reads.
_HPARAMS_PLUGIN = "hparams"
_HPARAMS_VERSION = 0
SESSION_START_TAG = "_hparams_/session_start_info"
SESSION_END_TAG = "_hparams_/session_end_info"


class EventFile:
    """One new ``events.out.tfevents.*`` file in ``folder``."""

    def __init__(self, folder: Path):
        from tensorboard.summary.writer.record_writer import RecordWriter

        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / _file_name(folder)
        self._handle = open(self.path, "ab")
        self._records = RecordWriter(self._handle)
        self._event(file_version="brain.Event:2")
        self.flush()

    def scalars(self, step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._event(step=step, summary=Summary(value=[
            Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]))

    def image(self, step: int, tag: str, png: bytes) -> None:
        """A PNG file's bytes as an image (TensorBoard decodes it itself)."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        width, height, channels = png_shape(png)
        image = Summary.Image(height=height, width=width, colorspace=channels,
                              encoded_image_string=png)
        self._event(step=step, summary=Summary(value=[Summary.Value(tag=tag, image=image)]))

    def text(self, step: int, tag: str, text: str) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode()],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        self._event(step=step, summary=Summary(value=[
            Summary.Value(tag=tag, metadata=metadata, tensor=tensor)]))

    def restart_at(self, step: int) -> None:
        """Say that the run starts again at ``step``: TensorBoard drops what an earlier
        attempt wrote from ``step`` on (a resumed run, or rounds redone after a restart),
        so every step keeps one value and the curves go on where they left off."""
        from tensorboard.compat.proto.event_pb2 import SessionLog

        self._event(step=step, session_log=SessionLog(status=SessionLog.START))

    def hparams_start(self, hparams: dict) -> None:
        """The run's hyperparameters for the HParams dashboard (its metrics are this run's
        scalars)."""
        from tensorboard.plugins.hparams.plugin_data_pb2 import SessionStartInfo

        info = SessionStartInfo(start_time_secs=time.time())
        for key, value in hparams.items():
            if isinstance(value, bool):
                info.hparams[key].bool_value = value
            elif isinstance(value, (int, float)):
                info.hparams[key].number_value = value
            else:
                info.hparams[key].string_value = str(value)
        self._hparams(SESSION_START_TAG, session_start_info=info)

    def hparams_end(self) -> None:
        """The run ended well (TensorBoard shows a run's first end status only)."""
        from tensorboard.plugins.hparams.api_pb2 import Status
        from tensorboard.plugins.hparams.plugin_data_pb2 import SessionEndInfo

        status = Status.STATUS_SUCCESS
        self._hparams(SESSION_END_TAG,
                      session_end_info=SessionEndInfo(status=status, end_time_secs=time.time()))

    def flush(self) -> None:
        self._records.flush()

    def close(self) -> None:
        if not self._handle.closed:
            self._records.flush()
            self._handle.close()

    def _hparams(self, tag: str, **content) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

        data = HParamsPluginData(version=_HPARAMS_VERSION, **content)
        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
            plugin_name=_HPARAMS_PLUGIN, content=data.SerializeToString()))
        self._event(summary=Summary(value=[Summary.Value(tag=tag, metadata=metadata)]))

    def _event(self, step: int = 0, **fields) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self._records.write(Event(wall_time=time.time(), step=step, **fields)
                            .SerializeToString())


def _file_name(folder: Path) -> str:
    """TensorBoard's name for an event file. It reads a folder's files in name order, so a
    resumed run's file must sort after the earlier ones: its timestamp is past theirs."""
    stamp = int(time.time())
    for existing in folder.glob("events.out.tfevents.*"):
        try:
            stamp = max(stamp, int(existing.name.split(".")[3]) + 1)
        except (IndexError, ValueError):
            pass
    return f"events.out.tfevents.{stamp:010d}.{socket.gethostname()}.{os.getpid()}.0"


def png_shape(png: bytes) -> tuple[int, int, int]:
    """(width, height, channels) from a PNG's header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or len(png) < 26:
        raise ValueError("not a PNG file")
    width, height = struct.unpack(">II", png[16:24])
    channels = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(png[25], 4)
    return width, height, channels
