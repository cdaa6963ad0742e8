"""The `saes` part in the window: what `capture` reads of the SAEs open, and how a session's
SAEs are opened again.

Reopening loads each SAE of the session on the worker, in index order, through the same load as
File > Open SAE (`SaeLoadRequest`: the path is untrusted, checked like a typed one). The worker
numbers what it attaches itself, so each saved index is mapped to the one it gets; once every
load has answered, the session's clamps are put back under the new indices, with the selected
feature and the panel's settings. An SAE that is gone, or whose files changed (another
fingerprint, width or hook point), is one line that keeps the rest of the session; its clamps
are dropped, and the line names them. An SAE already open in the window with the same files is
used as it is (a session reopened on the model already open).
"""

from __future__ import annotations

import os
from dataclasses import replace

from transformer_viewer.model.sessions.fingerprint import SAMPLED, Fingerprint
from transformer_viewer.model.sessions.saes_part import SaeRecord, SaesRecord


def capture(window) -> SaesRecord:
    saes = window.state.saes
    records = tuple(
        SaeRecord(index=s.index, spec=None if s.bundled else s.spec, hook=s.hook, d_in=s.d_in, d_sae=s.d_sae,
                  fingerprint=s.fingerprint or Fingerprint(SAMPLED, "", 0),
                  labels=None if s.bundled and saes.labels_file(s.index) == s.labels_path else saes.labels_file(s.index))
        for s in saes.attached)
    return SaesRecord(records, saes.sae, saes.feature if saes.sae is not None else None, saes.show_bos, saes.top)


def _same_files(attached, record: SaeRecord) -> bool:
    fp = attached.fingerprint
    spec_same = attached.bundled if record.spec is None else attached.spec == record.spec
    return (spec_same and attached.hook == record.hook and attached.d_sae == record.d_sae
            and (fp is None or not record.fingerprint.digest or fp == record.fingerprint))


class SaeRestore:
    """Opens a session's SAEs again and then puts back its clamps and feature selection."""

    def __init__(self, window):
        self.w = window
        self.waiting: set[int] = set()  # saved indices whose load has not answered yet
        self.record: SaesRecord | None = None
        self._generation = 0  # answers of an earlier session's loads are let go

    @property
    def busy(self) -> bool:
        return self.record is not None

    def start(self, record: SaesRecord, clamps: tuple, notes: list[str], fresh_model: bool) -> None:
        """Open `record`'s SAEs (`fresh_model`: on a model just loaded, whose SAEs are none yet);
        `clamps` (FeatureClamps naming saved indices) follow once all have answered."""
        from transformer_viewer.viewer.window.sae_menu import bundled_sae

        self._generation += 1
        self.record, self.clamps, self.notes = record, tuple(clamps), notes
        self.mapping: dict[int, int] = {}
        self.dropped: dict[int, str] = {}  # saved index -> why its clamps were dropped
        self.waiting = set()
        if fresh_model:
            self.w.sae_menu.skip_bundled_once = True  # the session says which SAEs are open
        taken: set[int] = set()
        for s in record.saes:
            if not fresh_model:
                same = next((a for a in self.w.state.saes.attached if a.index not in taken and _same_files(a, s)), None)
                if same is not None:
                    taken.add(same.index)
                    self.mapping[s.index] = same.index
                    continue
            labels = s.labels
            if s.spec is None:
                found = bundled_sae()
                if found is None:
                    self._lost(s, "the bundled SAE is not installed here")
                    continue
                spec, labels = found[0], labels or found[1]
            else:
                spec = s.spec
            if labels is not None and not os.path.isfile(labels):
                notes.append(f"the labels file {labels} of SAE {s.index} is not on this machine; its features are "
                             "unlabelled (File > Open feature labels)")
                labels = None
            self.waiting.add(s.index)
            self._submit(s, spec, labels)
        self._finish_if_done()

    def _submit(self, s: SaeRecord, spec: str, labels: str | None) -> None:
        from transformer_viewer.viewer.worker.sae import SaeLoadRequest

        g = self._generation
        self.w.worker.submit(SaeLoadRequest(spec=spec, hook=s.hook, labels=labels),
                             on_result=lambda a: g == self._generation and self._loaded(s, a),
                             on_failure=lambda f: g == self._generation and self._failed(s, f))

    def _where(self, s: SaeRecord) -> str:
        return f"SAE {s.index} of the session ({'the bundled SAE' if s.spec is None else s.spec})"

    def _lost(self, s: SaeRecord, why: str) -> None:
        self.dropped[s.index] = why
        self._say(f"{self._where(s)}: {why}; the rest of the session is kept{self._clamps_dropped(s.index)}")

    def _clamps_dropped(self, index: int) -> str:
        from transformer_viewer.viewer.views.clamp_controls import describe_clamp

        gone = [describe_clamp(c) for c in self.clamps if c.sae == index]
        return f", without its clamps ({'; '.join(gone)})" if gone else ""

    def _say(self, line: str) -> None:
        self.notes.append(line)
        self.w.show_error(line)

    def _loaded(self, s: SaeRecord, answer) -> None:
        if self.record is None or s.index not in self.waiting:
            return
        self.waiting.discard(s.index)
        sae = answer.value
        self.w.sae_menu.on_attached(answer)
        self.mapping[s.index] = sae.index
        fp = sae.fingerprint
        if sae.hook != s.hook or sae.d_sae != s.d_sae:
            self.dropped[s.index] = "changed"
            self._say(f"{self._where(s)}: now reads {sae.hook} with {sae.d_sae:,} features, the session's "
                      f"{s.hook} with {s.d_sae:,}; it is open, but its features are other ones"
                      f"{self._clamps_dropped(s.index) or ''}")
        elif fp is not None and s.fingerprint.digest and fp.method == s.fingerprint.method and fp != s.fingerprint:
            self.dropped[s.index] = "changed"
            self._say(f"{self._where(s)}: its files differ from the session's (its fingerprint changed); it is open, "
                      f"but its features may mean other things{self._clamps_dropped(s.index)}")
        self._finish_if_done()

    def _failed(self, s: SaeRecord, failure) -> None:
        if self.record is None or s.index not in self.waiting:
            return
        request = failure.request
        if request.labels is not None and not failure.cancelled:
            # The labels file may be what failed: say so, and open the SAE without it.
            self.notes.append(f"SAE {s.index}'s labels file {request.labels} was not read ({failure.message}); "
                              "its features are unlabelled")
            self._submit(s, request.spec, None)
            return
        self.waiting.discard(s.index)
        why = "opening it was cancelled" if failure.cancelled else failure.message.rstrip(".")
        self._lost(s, why)
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self.waiting or self.record is None:
            return
        from transformer_viewer.model.errors import ModelError

        record, self.record = self.record, None
        st = self.w.state
        kept = []
        for c in self.clamps:
            if c.sae in self.mapping and c.sae not in self.dropped:
                kept.append(replace(c, sae=self.mapping[c.sae]))
            elif not any(s.index == c.sae for s in record.saes):
                self.notes.append(f"a clamp of the session names SAE {c.sae}, which the session does not open; "
                                  "it was dropped")
        try:
            st.set_clamps(tuple(kept))
        except ModelError as e:
            self.notes.append(f"the session's clamps were not restored: {e}")
        saes = st.saes
        saes.set_show_bos(record.show_bos)
        saes.set_top(record.top)
        if record.selected_sae in self.mapping:
            saes.select(self.mapping[record.selected_sae], record.selected_feature)
        if self.notes:
            self.w.status.showMessage("session: " + self.notes[-1], 15000)
