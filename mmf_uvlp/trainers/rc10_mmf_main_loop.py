"""What MMF main's training loop does that MMF 1.0.0rc10's ``BaseTrainer`` does not, as a
mixin of the ``uvlp`` trainer on rc10 (:mod:`.rc10_trainer`); MMF's own ``base_trainer``
keeps rc10's loop.

- a run with ``training.max_updates=N`` makes N updates (rc10 stops only once
  ``num_updates > max_updates`` inside an epoch: N+1, so the scheduler, the last checkpoint
  and a resumed schedule were off by one);
- evaluation combines its reports per dataset (rc10 concatenates the scores of every
  dataset, so heads of different widths fail in ``torch.cat`` and metrics mix datasets);
  each dataset's predictions then pass the collapse check (:mod:`mmf_uvlp.metrics.collapse`).
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
from mmf.common.meter import Meter
from mmf.utils.distributed import is_master
from tqdm import tqdm

from mmf_uvlp.metrics.collapse import warn_if_collapsed


class MMFMainLoop:
    """``_logistics`` and ``evaluate`` of rc10's ``BaseTrainer``, as MMF main has them."""

    def _logistics(self, report: Any) -> bool:
        should_break = super()._logistics(report)  # type: ignore[misc]
        return should_break or self.num_updates >= self.max_updates

    def evaluate(
        self, loader: Any, use_tqdm: bool = False, single_batch: bool = False
    ) -> Tuple[Any, Meter]:
        """rc10's evaluation, its metrics computed per dataset (MMF main's evaluation loop)."""
        meter = Meter()
        combined: Dict[str, Any] = {}
        report = None
        with torch.no_grad():
            self.model.eval()
            for batch in tqdm(loader, disable=not use_tqdm or not is_master()):
                report = self._forward_pass(batch)
                self._update_meter(report, meter)
                previous = combined.get(report.dataset_name)
                if previous is None:
                    combined[report.dataset_name] = report
                else:
                    previous.accumulate_tensor_fields(report, self.metrics.required_params)
                    previous.batch_size += report.batch_size
                if single_batch:
                    break
            for report in combined.values():
                report.metrics = self.metrics(report, report)
                self._update_meter(report, meter, eval_mode=True)
                warn_if_collapsed(report, self.config.evaluation.metrics)
            self.model.train()
        return report, meter
