"""The fit: which parameters the figures identify, a bounded Levenberg-Marquardt on the
log of each parameter with finite-difference derivatives, and leave-one-out predictions.

The residual of a figure is log(simulated / published), so every figure weighs the same
whatever its unit and a 5% miss counts as much on a latency as on a bandwidth. Derivatives
are forward differences of STEP in log space (about 5%): the simulated figures are smooth
at that scale but not at a cycle's (a cycle count is an integer). The leave-one-out
prediction of a figure is a linearized refit without it around the full fit (the Jacobian
at the fit, the figure's row left out, parameters that only it identified put back to the
base's value), then checked with one real simulation at the refitted point: the reported
leave-one-out figure is that simulation, the linear estimate is kept beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nicsim.calibrate.model import Param, Simulator

STEP = 0.05  # finite-difference step in log space
# A parameter is identified when the figures move by at least this much (the norm of the
# elasticities d log(figure) / d log(parameter), after what the parameters identified before
# it already explain): a 10% change moves the figures by 0.5% in a way no other parameter
# can, about the noise of repeated perftest runs on one host.
IDENTIFIED = 0.05
MAX_EVALS = 40  # evaluations of the whole figure set the optimizer may spend


@dataclass
class Identified:
    keep: list[int]  # parameter indexes the figures identify, most identified first
    why: dict[int, str] = field(default_factory=dict)  # the others: why not


@dataclass
class Result:
    x: np.ndarray  # log values of every parameter (unidentified ones: the base's)
    ident: Identified
    sim: np.ndarray  # the simulated figures at x
    r: np.ndarray  # residuals log(sim / published)
    jac: np.ndarray  # d r / d x at x, every parameter's column (zero when never computed)
    evaluations: int  # whole-set evaluations the optimizer spent (its Jacobians included)
    iterations: int  # accepted steps
    stop: str  # why the optimizer stopped
    stderr: np.ndarray  # approximate standard error of each identified x (log), NaN else
    loo_x: list[np.ndarray | None] = field(default_factory=list)
    loo_linear: list[float | None] = field(default_factory=list)  # predicted log ratio
    loo_r: list[float | None] = field(default_factory=list)  # simulated log ratio


def identify(jac: np.ndarray, ps: list[Param], cols: list[int] | None = None) -> Identified:
    """Pivoted Gram-Schmidt on the Jacobian's columns: take the parameter the figures are
    most sensitive to, then the one with the most sensitivity left once the chosen ones'
    directions are removed, while that is at least IDENTIFIED."""
    cols = list(range(jac.shape[1])) if cols is None else list(cols)
    basis: list[np.ndarray] = []
    keep: list[int] = []
    left = list(cols)
    while left:
        best, best_norm, best_vec = -1, -1.0, np.zeros(jac.shape[0])
        for j in left:
            v = jac[:, j].copy()
            for q in basis:
                v -= (q @ v) * q
            n = float(np.linalg.norm(v))
            if n > best_norm:
                best, best_norm, best_vec = j, n, v
        if best_norm < IDENTIFIED:
            break
        keep.append(best)
        basis.append(best_vec / best_norm)
        left.remove(best)
    why: dict[int, str] = {}
    for j in left:
        raw = float(np.linalg.norm(jac[:, j]))
        if raw < IDENTIFIED:
            why[j] = (f"the figures barely depend on it (10% moves them by "
                      f"{raw * 10:.2g}% in all)")
        else:
            # the kept parameter whose column is most nearly parallel to this one's
            def cos(k: int, j: int = j) -> float:
                a, b = jac[:, j], jac[:, k]
                return abs(float(a @ b)) / max(float(np.linalg.norm(a) * np.linalg.norm(b)),
                                               1e-12)
            twin = max(keep, key=cos) if keep else None
            other = f" from {ps[twin].name}" if twin is not None else ""
            why[j] = f"the figures cannot tell it{other} (add a figure that moves only one)"
    return Identified(keep, why)


def _jacobian(sim: Simulator, ps: list[Param], x: np.ndarray, r: np.ndarray,
              cols: list[int], pub: np.ndarray) -> np.ndarray:
    jac = np.zeros((len(r), len(ps)))
    for j in cols:
        h = STEP if x[j] + STEP <= ps[j].x_hi else -STEP
        xj = x.copy()
        xj[j] += h
        jac[:, j] = (np.log(sim.all(xj) / pub) - r) / h
    return jac


def fit(sim: Simulator, ps: list[Param], pub: np.ndarray,
        max_evals: int = MAX_EVALS) -> Result:
    """Fit the identified parameters from the base's values; the others stay there."""
    lo = np.array([p.x_lo for p in ps])
    hi = np.array([p.x_hi for p in ps])
    x = np.array([p.x_base for p in ps])
    r = np.log(sim.all(x) / pub)
    evals = 1
    allc = list(range(len(ps)))
    jac = _jacobian(sim, ps, x, r, allc, pub)
    evals += len(ps)
    ident = identify(jac, ps)
    free = ident.keep
    cost = 0.5 * float(r @ r)
    lam, its, stop = 1e-2, 0, "evaluation limit"
    jac_at_x = True
    while free:
        if evals >= max_evals:
            break
        J = jac[:, free]
        a = J.T @ J
        g = J.T @ r
        step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-9), -g)
        xn = x.copy()
        xn[free] = np.clip(x[free] + step, lo[free], hi[free])
        if np.max(np.abs(xn - x)) < 1e-3:
            stop = "converged (step below 0.1%)"
            break
        rn = np.log(sim.all(xn) / pub)
        evals += 1
        cn = 0.5 * float(rn @ rn)
        if cn < cost:
            gain = cost - cn
            x, r, cost = xn, rn, cn
            its += 1
            lam = max(lam / 3, 1e-6)
            jac_at_x = False
            if gain < 1e-4 * cost + 1e-9:
                stop = "converged (cost no longer falling)"
                break
            if evals + len(free) > max_evals:
                break
            jac = _jacobian(sim, ps, x, r, allc, pub)
            evals += len(ps)
            jac_at_x = True
        else:
            lam *= 5
            if lam > 1e4:
                stop = "converged (no step lowers the cost)"
                break
    if not jac_at_x:
        # (the leave-one-out refits linearize here; not counted against the optimizer)
        jac = _jacobian(sim, ps, x, r, allc, pub)
    stderr = np.full(len(ps), np.nan)
    n, k = len(r), len(free)
    if free and n > k:
        J = jac[:, free]
        s2 = float(r @ r) / (n - k)
        try:
            cov = s2 * np.linalg.inv(J.T @ J)
            stderr[free] = np.sqrt(np.maximum(np.diag(cov), 0))
        except np.linalg.LinAlgError:
            pass
    return Result(x, ident, sim.all(x), r, jac, evals, its, stop if free else "nothing to fit",
                  stderr)


def leave_one_out(sim: Simulator, ps: list[Param], pub: np.ndarray, res: Result) -> None:
    """For each figure: refit without it (linearized around the full fit), predict it, and
    simulate it at the refitted point. Fills res.loo_*; None where no other figure is left."""
    n = len(pub)
    lo = np.array([p.x_lo for p in ps])
    hi = np.array([p.x_hi for p in ps])
    base = np.array([p.x_base for p in ps])
    for i in range(n):
        rows = [k for k in range(n) if k != i]
        if not rows:
            res.loo_x.append(None)
            res.loo_linear.append(None)
            res.loo_r.append(None)
            continue
        J = res.jac[rows]
        keep = identify(J, ps, res.ident.keep).keep
        dropped = [j for j in res.ident.keep if j not in keep]
        x = res.x.copy()
        x[dropped] = base[dropped]
        # the other figures' residuals with the dropped parameters back at the base's
        r = res.r[rows] + J @ (x - res.x)
        if keep:
            delta, *_ = np.linalg.lstsq(J[:, keep], -r, rcond=None)
            x[keep] = np.clip(x[keep] + delta, lo[keep], hi[keep])
        lin = float(res.r[i] + res.jac[i] @ (x - res.x))
        res.loo_x.append(x)
        res.loo_linear.append(lin)
        res.loo_r.append(float(np.log(sim.one(x, i) / pub[i])))
