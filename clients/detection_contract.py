"""The contract of the object detectors' Python-backend models (``hf_object_detection`` after a
Hugging Face checkpoint, ``letterbox`` and ``box_decoder`` around a YOLO-style graph): the names the
builder writes, the models read and the clients match, declared once.

This file is the only copy. The models' packages link to it (``builder/python_models/<package>/
contract.py``), so the repository writer copies it beside ``model.py`` and each model imports it as
a sibling; the builder imports it from a model's package; the clients ship it. It imports nothing.
"""

# -- the pipeline's tensors ------------------------------------------------------------------------
IMAGE = "IMAGE"  # the request's encoded images (TYPE_STRING, [1] per image)
IMAGE_SIZE = "image_size"  # INT64 [2] per image: its height and width once turned upright (EXIF)
# The answer, per image: its own number of boxes (dims [-1, ...] beyond the batch axis). A request
# of one image gets exactly its boxes; a request of several is padded to its largest count, and
# COUNT says how many of each image's rows are boxes.
BOXES = "BOXES"  # FP32 [-1, 4]: xmin, ymin, xmax, ymax in the original image's pixels
SCORES = "SCORES"  # FP32 [-1], best first (a DETR-family checkpoint: the pipeline's order)
LABELS = "LABELS"  # STRING [-1]: the class names
CLASSES = "CLASSES"  # INT64 [-1]: the class ids
COUNT = "COUNT"  # INT32 [1]
OUTPUTS = (BOXES, SCORES, LABELS, CLASSES, COUNT)

# -- request parameters ----------------------------------------------------------------------------
THRESHOLD = "threshold"  # the lowest score kept (a float); unset: the model's own

# -- config parameters (string values) -------------------------------------------------------------
# hf_object_detection: how the checkpoint's image processor turns queries into detections
QUERY_SCORES = "query_scores"  # "softmax" (the last class is "no object") or "sigmoid"
TOP_K = "top_k"  # sigmoid: the best (query, class) pairs kept before the threshold (0: all)
DEFAULT_THRESHOLD = "threshold"  # the score threshold of a request that sets none
# letterbox: how an image becomes the graph's input
LETTERBOX_SIZE = "letterbox_size"  # "height,width" of the graph's input
PAD_VALUE = "pad_value"  # the grey level (0..255) of the padding
RESAMPLE = "resample"  # Pillow's filter: bilinear, nearest or bicubic
SCALE = "scale"  # pixel values are divided by it (255: 0..1)
CHANNELS = "channels"  # "RGB" or "BGR"
LAYOUT = "layout"  # "NCHW" or "NHWC"
DTYPE = "dtype"  # the graph input's numpy dtype: float32, float16 or uint8
# box_decoder: how a dense head is read
BOX_FORMAT = "box_format"  # cxcywh, xyxy or xywh, in the graph input's pixels
CLASS_SCORES = "class_scores"  # "probabilities" as they are, or "logits" (a sigmoid is applied)
HEAD_LAYOUT = "head_layout"  # "channels_first" ([4 + classes, anchors]) or "anchors_first"
IOU_THRESHOLD = "iou_threshold"  # suppression: boxes overlapping a better one by more are dropped
CLASS_AGNOSTIC = "class_agnostic"  # "true": boxes of different classes suppress each other too
MAX_DETECTIONS = "max_detections"  # at most this many boxes per image, best first
CLASS_NAMES = "labels"  # a JSON list of the class names, in id order
