"""The `saes` part: the sparse autoencoders the session had open, in the order of their indices
(what the intervention part's clamps name), each SAE's labels file, the selected feature, and the
features panel's settings (the BOS token listed or not, the features listed per token).

An SAE's `spec` is where it was opened from, as given: a folder, a params.npz (its hook point is
`hook`), or REPO_ID/SUBFOLDER in the local Hugging Face cache; None for the SAE that ships with
the bundled model, wherever this install keeps it. Like a checkpoint's path it is only text
here: a reopened session opens it through the same load as File > Open SAE, then compares the
fingerprint taken at that load with the one saved (fingerprint.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer_viewer.model.sessions.checkpoint_part import MAX_COUNT
from transformer_viewer.model.sessions.fields import Fields, bad_field
from transformer_viewer.model.sessions.fingerprint import HF_CACHE, SAMPLED, Fingerprint
from transformer_viewer.model.sessions.parts import Part
from transformer_viewer.model.sessions.prompt_part import MAX_FEATURES, MAX_SAE_INDEX, MAX_SAES

MAX_HOOK_CHARS = 200  # the longest hook name an SAE spec may carry (model/sae/sources.py)
MAX_TOP = 256  # features listed per token in the panel


@dataclass(frozen=True)
class SaeRecord:
    index: int  # the session's index of it: what clamps name
    spec: str | None  # where it was opened from; None: the bundled SAE
    hook: str  # the viewer's hook point it reads, e.g. "blocks.2.hook_resid_post"
    d_in: int
    d_sae: int
    fingerprint: Fingerprint
    labels: str | None = None  # its labels file (the bundled SAE's own: None, found beside it)


@dataclass(frozen=True)
class SaesRecord:
    saes: tuple[SaeRecord, ...] = ()
    selected_sae: int | None = None  # an index of `saes`
    selected_feature: int | None = None
    show_bos: bool = False
    top: int = 16


def _to_json(r: SaesRecord) -> dict:
    return {"saes": [{"index": s.index, "spec": s.spec, "hook": s.hook, "d_in": s.d_in, "d_sae": s.d_sae,
                      "fingerprint": {"method": s.fingerprint.method, "sha256": s.fingerprint.digest,
                                      "files": s.fingerprint.files},
                      "labels": s.labels} for s in r.saes],
            "selected": {"sae": r.selected_sae, "feature": r.selected_feature},
            "show_bos": r.show_bos, "top": r.top}


def _sae_from_json(f: Fields) -> SaeRecord:
    fp = f.nested("fingerprint", required=True)
    record = SaeRecord(
        index=f.integer("index", 0, MAX_SAE_INDEX, required=True), spec=f.text("spec"),
        hook=f.text("hook", required=True, max_chars=MAX_HOOK_CHARS), d_in=f.integer("d_in", 1, MAX_COUNT, required=True),
        d_sae=f.integer("d_sae", 1, MAX_FEATURES, required=True),
        fingerprint=Fingerprint(fp.choice("method", (HF_CACHE, SAMPLED), required=True),
                                fp.text("sha256", "", max_chars=64), fp.integer("files", 0, 1 << 16, 0)),
        labels=f.text("labels"))
    fp.finish()
    return record


def _from_json(f: Fields) -> SaesRecord:
    saes = []
    for i, item in enumerate(f.items("saes", MAX_SAES)):
        g = Fields(item, f"{f.where}.saes[{i}]", f.notes)
        sae = _sae_from_json(g)
        g.finish()
        if any(s.index == sae.index for s in saes):
            raise bad_field(f"{f.where}.saes[{i}].index", f"is {sae.index}, which another SAE of the session has")
        saes.append(sae)
    selected, feature = None, None
    if (g := f.nested("selected")) is not None:
        selected = g.integer("sae", 0, MAX_SAE_INDEX)
        feature = g.integer("feature", 0, MAX_FEATURES - 1)
        g.finish()
        chosen = next((s for s in saes if s.index == selected), None)
        if selected is not None and chosen is None:
            raise bad_field(f"{g.where}.sae", f"is {selected}, which no SAE of the session has")
        if feature is not None and (chosen is None or feature >= chosen.d_sae):
            raise bad_field(f"{g.where}.feature", f"is {feature}, not a feature of the selected SAE")
    return SaesRecord(tuple(saes), selected, feature, f.flag("show_bos"), f.integer("top", 1, MAX_TOP, 16))


PART = Part("saes", 1, _to_json, _from_json)
