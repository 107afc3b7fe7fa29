"""The doctor lab: claims about the installed code (C10) and the source's 1/n diagnostic (C14); its scale
probe of the installed BERT, GPT-2, T5 and Llama is context for C13 (whose old BERT the history lab reads).

Everything here runs the installed ``transformers`` code; nothing is downloaded.

* :mod:`.experiment`: the config, the scale probe of small random-init BERT, GPT-2, T5 and Llama
  models, T5's logits at initialisation, the pretrained model diagnosed at its own factor and with
  it replaced, and two small decoders trained from scratch with the correct and a too-strong factor;
* :mod:`.verdicts`: the part readings of C10 and C14, with their thresholds;
* :mod:`.figures`: the figures, per claim, and the counterfactual.
* :mod:`.tables`: the rows the CLI prints and the report tabulates.
"""

from __future__ import annotations

from .experiment import PRESETS, VERSION, Config, random_model, run, runs_of, train_from_scratch
from .figures import figures
from .tables import tables
from .verdicts import NUMBER_KEYS, judge, judge_c10, judge_c14

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS",
           "random_model", "runs_of", "train_from_scratch", "judge_c10", "judge_c14"]
