"""Model: from run records to proxies, scaling laws, validation and prediction.

Reading order: ``tables`` (records -> a tidy frame) -> ``hardware`` (the device table) -> ``proxies`` and
``opcount`` (FLOPs, bytes, communication) -> ``efficiency`` (eta(p) and its USL fit) -> ``laws`` and ``fit``
(the paper's law, the energy roofline, baselines) -> ``validation`` (held-out groups) -> ``predict``.
Reads run records only; never launches a fine-tune.
"""
