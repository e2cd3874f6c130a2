"""Export torchvision's Faster R-CNN (MobileNetV3-Large 320 FPN) with pnnx, with PyTorch's
outputs, for the network tests (needs ``pip install -e .[export]``; nothing downloaded).

The weights are random (seed 0; the heads' last layers drawn wider than torchvision's
initialisation, so that boxes score differently rather than all alike, and BatchNorm
statistics randomised), the image 320 x 320. The exports are large (76 MB of weights), so
they go to ``artifacts/networks/<name>/`` (not committed), as tools/export_networks.py's::

    python tools/export_detectors.py                         # both
    python tools/export_detectors.py fasterrcnn_regions

Each folder holds ``model.pnnx.param``, ``model.pnnx.bin`` and ``io.npz`` (``in0`` and
PyTorch's ``out0``..). The two models:

``fasterrcnn_mobilenet_v3_320``
    The whole detector: boxes, scores and labels of its detections. Traced as it is,
    torchvision's ``batched_nms`` becomes a ``prim::If`` (its test for no boxes) whose
    branches pnnx does not write, so the graph loses both nms calls; exported here with
    ``batched_nms`` replaced by what it computes when traced (each class's boxes moved
    apart, one ``nms``), checked to give the unchanged model's detections. How many boxes
    pass the score thresholds and nms is known only when it runs.
``fasterrcnn_regions``
    The largest part of it whose sizes are all known before the run: the backbone and FPN,
    the RPN head, the anchors' decoding, each level's best proposals, the best ``TOP`` of
    them in place of the RPN's score threshold and nms, multi-scale RoIAlign (every level
    pooled for every box, each box keeping its own level's: MultiScaleRoIAlign's result,
    checked), the box head and the per-class box decoding. Outputs: per-class boxes
    (TOP, classes, 4), class probabilities (TOP, classes) and the proposals (TOP, 4).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "artifacts" / "networks"
SIZE = 320
#: Proposals the regions model keeps, in place of the RPN's nms.
TOP = 64
CLASSES = 5


def build_detector() -> nn.Module:
    from torchvision.models import detection

    torch.manual_seed(0)
    model = detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                            num_classes=CLASSES).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        heads = (model.rpn.head.cls_logits, model.rpn.head.bbox_pred, model.roi_heads.box_predictor.cls_score,
                 model.roi_heads.box_predictor.bbox_pred)
        for layer in heads:
            layer.weight.normal_(0, 0.3)
            layer.bias.normal_(0, 0.3)
    return model


def batched_nms_as_traced(boxes, scores, classes, iou_threshold):
    """torchvision's batched_nms below 4000 boxes, without its test for no boxes."""
    from torchvision.ops import boxes as box_ops

    offsets = classes.to(boxes) * (boxes.max() + torch.tensor(1).to(boxes))
    return box_ops.nms(boxes + offsets[:, None], scores, iou_threshold)


class Detections(nn.Module):
    """The whole detector on one image: its detections' boxes, scores and labels."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images):
        found = self.model([images[0]])[0]
        return found["boxes"], found["scores"], found["labels"]


class Regions(nn.Module):
    """The detector up to its data-dependent steps (see the module docstring)."""

    def __init__(self, model: nn.Module):
        from torchvision.models.detection.image_list import ImageList

        super().__init__()
        self.model = model
        blank = torch.zeros(1, 3, SIZE, SIZE)
        with torch.no_grad():
            maps = list(model.backbone(blank).values())
            anchors = model.rpn.anchor_generator(ImageList(blank, [(SIZE, SIZE)]), maps)[0]
            model.roi_heads.box_roi_pool(model.backbone(blank), [torch.tensor([[0.0, 0.0, 9.0, 9.0]])],
                                         [(SIZE, SIZE)])  # a first call sets up its scales
        per_cell = model.rpn.anchor_generator.num_anchors_per_location()
        self.counts = [a * m.shape[2] * m.shape[3] for a, m in zip(per_cell, maps)]
        self.register_buffer("anchors", anchors)
        self.register_buffer("mean", torch.tensor(model.transform.image_mean)[:, None, None])
        self.register_buffer("std", torch.tensor(model.transform.image_std)[:, None, None])

    def proposals(self, images):
        """Each level's best boxes by objectness, as the RPN takes them before its nms."""
        from torchvision.models.detection.rpn import concat_box_prediction_layers
        from torchvision.ops import boxes as box_ops

        m = self.model
        features = m.backbone((images - self.mean) / self.std)
        objectness, deltas = concat_box_prediction_layers(*m.rpn.head(list(features.values())))
        decoded = m.rpn.box_coder.decode(deltas, [self.anchors]).view(-1, 4)
        objectness = objectness.view(-1)
        picked, start = [], 0
        for count in self.counts:
            _, best = objectness[start:start + count].topk(min(m.rpn.pre_nms_top_n(), count))
            picked.append(best + start)
            start += count
        picked = torch.cat(picked)
        return features, box_ops.clip_boxes_to_image(decoded[picked], (SIZE, SIZE)), objectness[picked], picked

    def pool(self, features, boxes):
        """MultiScaleRoIAlign's result with sizes known before the run."""
        from torchvision.ops import roi_align

        pooler = self.model.roi_heads.box_roi_pool
        levels = pooler.map_levels([boxes])
        rois = torch.cat([torch.zeros_like(boxes[:, :1]), boxes], dim=1)
        pooled = 0
        for level, (name, scale) in enumerate(zip(pooler.featmap_names, pooler.scales)):
            one = roi_align(features[name], rois, pooler.output_size, scale, pooler.sampling_ratio)
            pooled = pooled + one * (levels == level).to(one.dtype)[:, None, None, None]
        return pooled

    def forward(self, images):
        from torchvision.ops import boxes as box_ops

        heads = self.model.roi_heads
        features, boxes, objectness, _ = self.proposals(images)
        _, best = objectness.topk(TOP)
        boxes = boxes[best]
        class_logits, box_regression = heads.box_predictor(heads.box_head(self.pool(features, boxes)))
        per_class = box_ops.clip_boxes_to_image(heads.box_coder.decode(box_regression, [boxes]), (SIZE, SIZE))
        return per_class, F.softmax(class_logits, -1), boxes


def image() -> torch.Tensor:
    return torch.rand(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


def checked_detections(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """The whole detector with batched_nms as traced, once its detections are checked to
    be the unchanged model's."""
    from torchvision.ops import boxes as box_ops

    with torch.no_grad():
        unchanged = Detections(model)(x)
        box_ops.batched_nms, original = batched_nms_as_traced, box_ops.batched_nms
        try:
            changed = Detections(model)(x)
        finally:
            box_ops.batched_nms = original
    assert all(torch.equal(a, b) for a, b in zip(unchanged, changed)), "batched_nms as traced changed the detections"
    return Detections(model)


def checked_regions(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """The regions model, once its proposals and pooling are checked to be torchvision's."""
    from torchvision.models.detection.rpn import concat_box_prediction_layers

    regions = Regions(model).eval()
    with torch.no_grad():
        features, boxes, _, picked = regions.proposals(x)
        objectness, _ = concat_box_prediction_layers(*model.rpn.head(list(features.values())))
        torchvision_pick = model.rpn._get_top_n_idx(objectness.view(1, -1), regions.counts)[0]
        assert torch.equal(picked, torchvision_pick), "each level's best proposals differ from the RPN's"
        pooled = model.roi_heads.box_roi_pool(features, [boxes], [(SIZE, SIZE)])
        assert torch.equal(regions.pool(features, boxes), pooled), "the pooling differs from MultiScaleRoIAlign's"
    return regions


MODELS = {"fasterrcnn_mobilenet_v3_320": checked_detections, "fasterrcnn_regions": checked_regions}


def export(name: str) -> Path:
    import pnnx
    from torchvision.ops import boxes as box_ops

    x = image()
    module = MODELS[name](build_detector(), x).eval()
    box_ops.batched_nms, original = batched_nms_as_traced, box_ops.batched_nms
    try:
        with torch.no_grad():
            outputs = module(x)
        target = TARGET / name
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                pnnx.export(module, str(Path(tmp) / "model.pt"), (x,), fp16=False)
            except Exception as exc:  # pnnx may fail (writing its Python file) after the model
                if not (Path(tmp) / "model.pnnx.param").exists():
                    raise
                print(f"  (pnnx raised after writing the model, kept it: {type(exc).__name__})")
            for suffix in (".pnnx.param", ".pnnx.bin"):
                shutil.move(Path(tmp) / f"model{suffix}", target / f"model{suffix}")
    finally:
        box_ops.batched_nms = original
    np.savez(target / "io.npz", in0=x.numpy(), **{f"out{i}": t.numpy() for i, t in enumerate(outputs)})
    return target


if __name__ == "__main__":
    for network in sys.argv[1:] or list(MODELS):
        print(f"{network}: exported to {export(network)}", flush=True)
