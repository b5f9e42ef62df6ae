"""Hand-written, out-of-place, pure-PyTorch optimizer steps: the references the tests unroll.

Each ``<algo>_reference(**hyper)`` returns ``(init, step)`` over lists of tensors, written
straight from the update rules of ``torch.optim`` without any diffopt code, so that meta-gradients
can be compared against an independent unrolled implementation.
"""

from __future__ import annotations

import math

import torch


def sgd_reference(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    def init(params):
        return {"buf": [None] * len(params)}

    def step(params, grads, state):
        out, bufs = [], []
        for p, g, b in zip(params, grads, state["buf"]):
            g = g + weight_decay * p
            if momentum:
                b = g if b is None else momentum * b + (1 - dampening) * g
                g = g + momentum * b if nesterov else b
            bufs.append(b)
            out.append(p - lr * g)
        return out, {"buf": bufs}

    return init, step


def adam_reference(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    b1, b2 = betas

    def init(params):
        return {"m": [torch.zeros_like(p) for p in params],
                "v": [torch.zeros_like(p) for p in params], "t": 0}

    def step(params, grads, state):
        t = state["t"] + 1
        out, ms, vs = [], [], []
        for p, g, m, v in zip(params, grads, state["m"], state["v"]):
            if weight_decay and not decoupled:
                g = g + weight_decay * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            d = (m / (1 - b1**t)) / (torch.sqrt(v / (1 - b2**t)) + eps)
            if decoupled:
                d = d + weight_decay * p
            out.append(p - lr * d)
            ms.append(m)
            vs.append(v)
        return out, {"m": ms, "v": vs, "t": t}

    return init, step


def adamw_reference(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    return adam_reference(lr, betas, eps, weight_decay, decoupled=True)


def rmsprop_reference(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                      centered=False):
    def init(params):
        zeros = [torch.zeros_like(p) for p in params]
        return {"sq": zeros, "avg": list(zeros), "buf": list(zeros)}

    def step(params, grads, state):
        out, sqs, avgs, bufs = [], [], [], []
        for p, g, sq, avg, buf in zip(params, grads, state["sq"], state["avg"], state["buf"]):
            g = g + weight_decay * p
            sq = alpha * sq + (1 - alpha) * g * g
            if centered:
                avg = alpha * avg + (1 - alpha) * g
                denom = torch.sqrt(sq - avg * avg) + eps
            else:
                denom = torch.sqrt(sq) + eps
            if momentum:
                buf = momentum * buf + g / denom
                out.append(p - lr * buf)
            else:
                out.append(p - lr * g / denom)
            sqs.append(sq)
            avgs.append(avg)
            bufs.append(buf)
        return out, {"sq": sqs, "avg": avgs, "buf": bufs}

    return init, step


def adagrad_reference(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                      eps=1e-10):
    def init(params):
        return {"sum": [torch.full_like(p, initial_accumulator_value) for p in params], "t": 0}

    def step(params, grads, state):
        t = state["t"] + 1
        clr = lr / (1 + (t - 1) * lr_decay)
        out, sums = [], []
        for p, g, s in zip(params, grads, state["sum"]):
            g = g + weight_decay * p
            s = s + g * g
            out.append(p - clr * g / (torch.sqrt(s) + eps))
            sums.append(s)
        return out, {"sum": sums, "t": t}

    return init, step


def adadelta_reference(lr=1e-3, rho=0.9, eps=1e-6, weight_decay=0.0):
    def init(params):
        return {"sq": [torch.zeros_like(p) for p in params],
                "acc": [torch.zeros_like(p) for p in params]}

    def step(params, grads, state):
        out, sqs, accs = [], [], []
        for p, g, sq, acc in zip(params, grads, state["sq"], state["acc"]):
            g = g + weight_decay * p
            sq = rho * sq + (1 - rho) * g * g
            delta = torch.sqrt(acc + eps) / torch.sqrt(sq + eps) * g
            acc = rho * acc + (1 - rho) * delta * delta
            out.append(p - lr * delta)
            sqs.append(sq)
            accs.append(acc)
        return out, {"sq": sqs, "acc": accs}

    return init, step


def adamax_reference(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    b1, b2 = betas

    def init(params):
        return {"m": [torch.zeros_like(p) for p in params],
                "u": [torch.zeros_like(p) for p in params], "t": 0}

    def step(params, grads, state):
        t = state["t"] + 1
        out, ms, us = [], [], []
        for p, g, m, u in zip(params, grads, state["m"], state["u"]):
            g = g + weight_decay * p
            m = b1 * m + (1 - b1) * g
            u = torch.maximum(b2 * u, g.abs() + eps)
            out.append(p - lr / (1 - b1**t) * m / u)
            ms.append(m)
            us.append(u)
        return out, {"m": ms, "u": us, "t": t}

    return init, step


def radam_reference(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
    b1, b2 = betas
    rho_inf = 2 / (1 - b2) - 1

    def init(params):
        return {"m": [torch.zeros_like(p) for p in params],
                "v": [torch.zeros_like(p) for p in params], "t": 0}

    def step(params, grads, state):
        t = state["t"] + 1
        rho_t = rho_inf - 2 * t * b2**t / (1 - b2**t)
        out, ms, vs = [], [], []
        for p, g, m, v in zip(params, grads, state["m"], state["v"]):
            g = g + weight_decay * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            m_hat = m / (1 - b1**t)
            if rho_t > 5:
                r = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                              / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                adaptive = math.sqrt(1 - b2**t) / (torch.sqrt(v) + eps)
                out.append(p - lr * m_hat * r * adaptive)
            else:
                out.append(p - lr * m_hat)
            ms.append(m)
            vs.append(v)
        return out, {"m": ms, "v": vs, "t": t}

    return init, step


def lion_reference(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
    """Lion as the paper's Algorithm writes it (Chen et al., 2023)."""
    b1, b2 = betas

    def init(params):
        return {"m": [torch.zeros_like(p) for p in params]}

    def step(params, grads, state):
        out, ms = [], []
        for p, g, m in zip(params, grads, state["m"]):
            out.append(p - lr * (torch.sign(b1 * m + (1 - b1) * g) + weight_decay * p))
            ms.append(b2 * m + (1 - b2) * g)
        return out, {"m": ms}

    return init, step


def adan_reference(lr=1e-3, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0, no_prox=False):
    """Adan (Xie et al.), betas as decay rates, a zero gradient difference on the first step."""
    b1, b2, b3 = betas

    def init(params):
        return {"m": [torch.zeros_like(p) for p in params], "v": [torch.zeros_like(p) for p in params],
                "n": [torch.zeros_like(p) for p in params], "prev": [None] * len(params), "t": 0}

    def step(params, grads, state):
        t = state["t"] + 1
        out, ms, vs, ns = [], [], [], []
        for p, g, m, v, n, prev in zip(params, grads, state["m"], state["v"], state["n"], state["prev"]):
            d = torch.zeros_like(g) if prev is None else g - prev
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * d
            n = b3 * n + (1 - b3) * (g + b2 * d) ** 2
            u = (m / (1 - b1**t) + b2 * v / (1 - b2**t)) / (torch.sqrt(n / (1 - b3**t)) + eps)
            out.append(p * (1 - lr * weight_decay) - lr * u if no_prox else (p - lr * u) / (1 + lr * weight_decay))
            ms.append(m)
            vs.append(v)
            ns.append(n)
        return out, {"m": ms, "v": vs, "n": ns, "prev": list(grads), "t": t}

    return init, step


def nadam_reference(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3,
                    decoupled=False):
    b1, b2 = betas

    def momentum(t):
        return b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))

    def init(params):
        # torch.optim keeps the momentum product as a 0-d tensor of the default float type.
        return {"m": [torch.zeros_like(p) for p in params], "v": [torch.zeros_like(p) for p in params],
                "t": 0, "prod": torch.tensor(1.0, dtype=torch.get_default_dtype())}

    def step(params, grads, state):
        t = state["t"] + 1
        prod = state["prod"] * momentum(t)
        c_grad = (1 - momentum(t)) / (1 - float(prod))
        c_avg = momentum(t + 1) / (1 - float(prod) * momentum(t + 1))
        out, ms, vs = [], [], []
        for p, g, m, v in zip(params, grads, state["m"], state["v"]):
            if decoupled:
                p = p * (1 - lr * weight_decay)
            else:
                g = g + weight_decay * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            denom = torch.sqrt(v / (1 - b2**t)) + eps
            out.append(p - lr * (c_grad * g / denom + c_avg * m / denom))
            ms.append(m)
            vs.append(v)
        return out, {"m": ms, "v": vs, "t": t, "prod": prod}

    return init, step


def rprop_reference(lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0)):
    etaminus, etaplus = etas

    def init(params):
        return {"prev": [torch.zeros_like(p) for p in params], "s": [torch.full_like(p, lr) for p in params]}

    def step(params, grads, state):
        out, prevs, sizes = [], [], []
        for p, g, prev, s in zip(params, grads, state["prev"], state["s"]):
            agree = (g * prev).detach()
            factor = torch.ones_like(s)
            factor[agree > 0] = etaplus
            factor[agree < 0] = etaminus
            s = torch.clamp(s * factor, *step_sizes)
            g = torch.where(agree < 0, 0.0, g)
            out.append(p - torch.sign(g) * s)
            prevs.append(g)
            sizes.append(s)
        return out, {"prev": prevs, "s": sizes}

    return init, step


def asgd_reference(lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0):
    def init(params):
        dtype = torch.get_default_dtype()
        return {"ax": [torch.zeros_like(p) for p in params], "t": 0,
                "eta": torch.tensor(lr, dtype=dtype), "mu": torch.tensor(1.0, dtype=dtype)}

    def step(params, grads, state):
        t = state["t"] + 1
        eta, mu = float(state["eta"]), float(state["mu"])
        out, axs = [], []
        for p, g, ax in zip(params, grads, state["ax"]):
            g = g + weight_decay * p
            p = p * (1 - lambd * eta) - eta * g
            out.append(p)
            axs.append(p if mu == 1 else ax + mu * (p - ax))
        dtype = state["eta"].dtype
        return out, {"ax": axs, "t": t, "eta": torch.tensor(lr / (1 + lambd * lr * t) ** alpha, dtype=dtype),
                     "mu": torch.tensor(1 / max(1, t - t0), dtype=dtype)}

    return init, step


def adafactor_reference(lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0):
    eps1, eps2 = eps

    def init(params):
        rows = [torch.zeros(*p.shape[:-1], 1, dtype=p.dtype) if p.dim() > 1 else torch.zeros_like(p) for p in params]
        cols = [torch.zeros(*p.shape[:-2], 1, p.shape[-1], dtype=p.dtype) if p.dim() > 1 else None for p in params]
        return {"row": rows, "col": cols, "t": 0}

    def step(params, grads, state):
        t = state["t"] + 1
        w = t**beta2_decay
        rho = min(lr, 1 / math.sqrt(t))
        out, rows, cols = [], [], []
        for p, g, row, col in zip(params, grads, state["row"], state["col"]):
            e1 = torch.finfo(p.dtype).eps if eps1 is None else eps1
            alpha = torch.clamp(p.pow(2).sum().sqrt() / math.sqrt(p.numel()), min=eps2) * rho
            if p.dim() > 1:
                row = row + w * ((g * g).mean(-1, keepdim=True) - row)
                col = col + w * ((g * g).mean(-2, keepdim=True) - col)
                v = row * col / torch.clamp(row.mean(-2, keepdim=True), min=e1)
            else:
                row = row + w * (g * g - row)
                v = row
            u = g / torch.sqrt(torch.clamp(v, min=e1 * e1))
            denom = torch.clamp(u.pow(2).sum().sqrt() / (math.sqrt(u.numel()) * d), min=1.0)
            out.append(p * (1 - lr * weight_decay) - alpha / denom * u)
            rows.append(row)
            cols.append(col)
        return out, {"row": rows, "col": cols, "t": t}

    return init, step
