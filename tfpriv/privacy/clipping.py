"""Per-group squared gradient norms and weighted gradient sums from one tapped forward pass.

Groups are either single examples (sample-wise terms, phi_i) or partitions of the batch
(batch-wise terms, psi_j). `FastPass` gets them from layer rules (ghost norms and
book-keeping, `rules/`); `VectorizedPass` from per-example Jacobians of the whole
model; `tfpriv.privacy.per_example.PerExamplePass` from each example's loss differentiated
alone under `tf.vectorized_map`. All expose the same operations the engine needs:

  sample_sq_norms()      ||grad phi_i||^2                        [B]
  partition_sq_norms()   ||grad psi_j||^2                        [P]
  micro_sq_norms()       ||grad phi_i + grad sum_j psi_j||^2     [B]  (micro with batch terms)
  weighted(c_phi, c_psi) sum_i c_phi_i grad phi_i + sum_j c_psi_j grad psi_j
                         (a group with coefficient 0 adds exactly 0, even if it holds NaN/inf)
  psi_reaches            [bool] per variable: whether the batch-wise terms reach it at all;
                         `weighted` adds no psi contribution to a variable they do not reach
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import tensorflow as tf

from tfpriv.errors import ConfigError
from tfpriv.privacy import rules
from tfpriv.privacy.pfor_rules import vectorized_conv_filter_gradients
from tfpriv.privacy.rules.base import mask_rows
from tfpriv.privacy.taps import TapRecorder
from tfpriv.privacy.terms import BatchLayout


def variables_dtype(variables: Sequence[tf.Variable]) -> tf.DType:
    """The one dtype of `variables`, float32 or float64, in which the engine computes norms, clip factors,
    sums and noise (a Keras 3 variable names its dtype as a string); ConfigError naming `variables` else."""
    dtypes = sorted({tf.as_dtype(v.dtype).base_dtype.name for v in variables})
    if len(dtypes) != 1 or dtypes[0] not in ("float32", "float64"):
        raise ConfigError(f"DP engine: the trainable variables must all be float32 or all float64; "
                          f"found {', '.join(dtypes) or 'none'}", param="variables")
    return tf.as_dtype(dtypes[0])


def _zeros_if_none(grads, like):
    return [tf.zeros_like(t) if g is None else g for g, t in zip(grads, like)]


# Extra cost of the ghost form, in rows: it needs the rows balanced first (`_balanced`, a few
# elementwise passes over U and V), which the direct form does not. Measured in issue 13 on the
# conv VAE's 49-position layers (du=512, dv=64): balancing cost as much as the ghost products.
BALANCING_ROWS = 48


def _ghost_pays(rows: float, du: int, dv: int) -> bool:
    """Whether the ghost norm is cheaper than the instantiated gradient for groups of `rows` rows.

    Ghost: sum_{r,s} (u_r·u_s)(v_r·v_s) costs rows^2 (du + dv) per group plus balancing;
    direct: ||sum_r u_r ⊗ v_r||^2 costs rows du dv (mixed ghost clipping, Bu et al. 2022).
    One row: the ghost norm is ||u||^2 ||v||^2, always the cheaper.
    """
    if rows == 1:
        return True
    return (rows + BALANCING_ROWS) * (du + dv) <= du * dv


def _ghost_sq_norms(u: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
    """||sum_r u_r ⊗ v_r||_F^2 per group for balanced u [G, R, du], v [G, R, dv]."""
    if u.shape[1] == 1:
        return tf.reduce_sum(tf.square(u), axis=[1, 2]) * tf.reduce_sum(tf.square(v), axis=[1, 2])
    uu = tf.einsum("gri,gsi->grs", u, u)
    vv = tf.einsum("grj,gsj->grs", v, v)
    return tf.reduce_sum(uu * vv, axis=[1, 2])


def _finite_or(fast: tf.Tensor, selected: Callable[[], tf.Tensor]) -> tf.Tensor:
    """`fast`, a coefficient-weighted sum over groups that did not select away the groups with
    coefficient 0, if it is finite: each of those then added 0 times a finite value, exactly 0.
    Else `selected()`, the same sum with them selected away (0 times NaN/inf is NaN). A masking
    select over a [G, du, dv] tensor costs as much as the sum itself; it runs only when needed."""
    return tf.cond(tf.reduce_all(tf.math.is_finite(fast)), lambda: fast, selected)


def _coef_sum(coef: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
    """sum_i coef_i rows_i over the leading axis: one matrix-vector product (`tf.tensordot` builds a
    dozen shape ops around it when the batch size is not static)."""
    if rows.shape.rank == 2:
        return tf.linalg.matvec(rows, coef, transpose_a=True)
    trailing = rows.shape[1:] if rows.shape[1:].is_fully_defined() else tf.shape(rows)[1:]
    flat = tf.reshape(rows, [tf.shape(rows)[0], -1])
    return tf.reshape(tf.linalg.matvec(flat, coef, transpose_a=True), trailing)


def weighted_rows(coef: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
    """sum_i coef_i rows_i over the leading axis, a row with coefficient 0 exactly 0 even if it holds
    NaN/inf (`_finite_or`: the masking select runs only when the plain sum is not finite)."""
    return _finite_or(_coef_sum(coef, rows), lambda: _coef_sum(coef, mask_rows(rows, coef != 0.0)))


def _masked_always(tap) -> bool:
    """Whether a layer call's weighted sum selects its dropped rows away at every step rather than behind
    a finiteness `tf.cond`: at one position per example (a Dense layer on vectors, an embedding of one
    id) the selects cover [R, d], cheaper than tracing the condition's second branch; at several
    (convolutions, sequences) copies of [R, T, d] at every step would hold more memory than the sum."""
    return tap.output.shape[1:-1].num_elements() == 1


class GroupOuter(NamedTuple):
    """Each group's instantiated kernel gradient: `values` [G, du, dv], or [G, dv, du] if `transposed`."""
    values: tf.Tensor
    transposed: bool


def _group_outer(u: tf.Tensor, v: tf.Tensor) -> GroupOuter:
    """sum_r u_r ⊗ v_r per group: the instantiated kernel gradient of each group.

    The batched product takes the factor with fewer columns as its transposed operand (TensorFlow's CPU
    kernel transposes that operand of every group first): [G, dv, du] when dv < du, 1.1–2.5x faster at
    the shapes of the bench models' conv and Dense layers (experiments/throughput/outer_orientation.py).
    Needs no balancing: each entry is a sum of products u_ri v_rj, which overflows only when
    the gradient itself does, and a zero factor gives an exact 0 unless the other is NaN/inf.
    """
    if v.shape[-1] < u.shape[-1]:
        return GroupOuter(tf.einsum("grj,gri->gji", v, u), True)
    return GroupOuter(tf.einsum("gri,grj->gij", u, v), False)


# Largest static partition count summed by one matrix product per partition (`_partition_outer`; each
# partition adds its ops to the traced step); above it (singleton partitions of a large batch) each
# example's product is summed by partition (a sorted segment sum).
MAX_PARTITION_PRODUCTS = 64


def _partition_outer(u: tf.Tensor, v: tf.Tensor, layout: BatchLayout) -> GroupOuter:
    """sum_r u_r ⊗ v_r over each partition's rows, u [B, T, du], v [B, T, dv]: the instantiated kernel
    gradient of each partition, [P, du, dv] (or [P, dv, du], oriented as `_group_outer`).

    With a static partition count P <= MAX_PARTITION_PRODUCTS, each partition's rows are one
    [n_p T, du] x [n_p T, dv] product: no [B, du, dv] per-example products written and read back, no
    padding (the conv VAE's termwise group norms 80 -> 61 ms, its step's peak memory ~3.0x -> ~2.6x;
    experiments/throughput/README.md). A row reaches only its own partition's sum either way, so a
    NaN/inf example leaves the other partitions finite.
    """
    parts = tf.get_static_value(layout.num_partitions)
    if parts is None or int(parts) > MAX_PARTITION_PRODUCTS:
        outer = _group_outer(u, v)
        return outer._replace(values=layout.sum_by_partition(outer.values))
    transposed = v.shape[-1] < u.shape[-1]
    left, right = (v, u) if transposed else (u, v)
    lefts = tf.dynamic_partition(left, layout.partition_ids, int(parts))
    rights = tf.dynamic_partition(right, layout.partition_ids, int(parts))
    return GroupOuter(tf.stack([tf.matmul(tf.reshape(a, [-1, left.shape[-1]]), tf.reshape(b, [-1, right.shape[-1]]),
                                          transpose_a=True) for a, b in zip(lefts, rights)]), transposed)


def _direct_sq_norms(u: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
    """||sum_r u_r ⊗ v_r||_F^2 per group by instantiating each group's gradient."""
    return _outer_sq_norms(_group_outer(u, v).values)


def _outer_sq_norms(outer: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.square(outer), axis=[1, 2])


def _balanced(u: tf.Tensor, v: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Rescales each pair of rows (u_t, v_t) to equal max-magnitude, leaving u_t ⊗ v_t unchanged.

    Norms then overflow only when the gradient itself does: a huge layer input against a
    zero output gradient (a saturated tanh) gives exact zeros, not inf * 0 = NaN. A row
    holding NaN/inf is left as it is, so its group's norm comes out non-finite (dropped).
    """
    finite = (tf.reduce_all(tf.math.is_finite(u), axis=-1, keepdims=True)
              & tf.reduce_all(tf.math.is_finite(v), axis=-1, keepdims=True))
    mu = tf.reduce_max(tf.abs(u), axis=-1, keepdims=True)
    mv = tf.reduce_max(tf.abs(v), axis=-1, keepdims=True)
    zero = finite & ((mu == 0.0) | (mv == 0.0))
    one, nought = tf.ones([], u.dtype), tf.zeros([], u.dtype)  # in u's dtype: a Python 1.0 is float32 when traced
    scale = tf.where(finite & ~zero, tf.sqrt(mv) / tf.sqrt(tf.where(zero, one, mu)), one)
    scale = tf.clip_by_value(scale, 1e-18, 1e18)  # any finite positive scale is exact
    return tf.where(zero, nought, u * scale), tf.where(zero, nought, v / scale)


def _row_sparse_sq_norms(ids: tf.Tensor, values: tf.Tensor, table_rows: int) -> tf.Tensor:
    """||sum_t e_{ids_gt} ⊗ values_gt||_F^2 per group for ids [G, T], values [G, T, w].

    Values sharing a (group, index) pair are summed before squaring: the norm is
    sum over pairs with equal indices of <g_t, g_s>, in O(G T w) rather than O(G T^2 w).
    """
    groups = tf.shape(ids)[0]
    key = tf.range(tf.cast(groups, tf.int64))[:, None] * table_rows + ids
    unique, slot = tf.unique(tf.reshape(key, [-1]))
    summed = tf.math.unsorted_segment_sum(tf.reshape(values, [-1, values.shape[-1]]), slot, tf.size(unique))
    return tf.math.unsorted_segment_sum(tf.reduce_sum(tf.square(summed), axis=1), unique // table_rows, groups)


def _row_sparse_sum(ids: tf.Tensor, values: tf.Tensor, table: tf.Variable) -> tf.Tensor:
    """sum_t e_{ids_t} ⊗ values_t over all rows: a dense gradient of `table`'s shape."""
    flat = tf.reshape(values, [-1, values.shape[-1]])
    return tf.reshape(tf.math.unsorted_segment_sum(flat, tf.reshape(ids, [-1]), table.shape[0]), table.shape)


def row_sq_norms(x: tf.Tensor) -> tf.Tensor:
    """Sum of squares over all but the first axis."""
    return tf.reduce_sum(tf.reshape(tf.square(x), [tf.shape(x)[0], -1]), axis=1)


def _row_coefficients(coef_example: tf.Tensor, rows: tf.Tensor, batch_size: tf.Tensor, ndims: int) -> tf.Tensor:
    """Per-example coefficients [B] -> per-row [R, 1, ...] for rows laid out example-major."""
    # tf.repeat(coef_example, rows // B) as a tile: the same values in a few graph ops, not ~20.
    per_row = tf.tile(coef_example[:, None], tf.stack([1, rows // tf.maximum(batch_size, 1)]))
    return tf.reshape(per_row, [rows] + [1] * (ndims - 1))


class FastPass:
    """Ghost norms and book-keeping sums from the taps of one forward pass."""

    def __init__(self, recorder: TapRecorder, variables: Sequence[tf.Variable], tape: tf.GradientTape,
                 phi: tf.Tensor, psi: tf.Tensor | None, layout: BatchLayout, batch_size: tf.Tensor,
                 expected_rows_per_partition: float):
        self.recorder = recorder
        self.variables = list(variables)
        self.dtype = variables_dtype(self.variables)  # of norms and clip factors
        self.layout = layout
        self.batch_size = batch_size
        self.expected_rows = expected_rows_per_partition
        self.tape = tape
        self.phi, self.psi = phi, psi
        taps = recorder.taps
        outputs = [t.output for t in taps]
        # output_gradients=ones differentiates sum(phi) without recording a new op on the tape.
        # None marks a call the term does not reach (e.g. decoder layers for a latent divergence);
        # such layers are skipped for that term rather than processed as zeros.
        self.g_phi = tape.gradient(phi, outputs, output_gradients=tf.ones_like(phi))
        self.g_psi = (tape.gradient(psi, outputs, output_gradients=tf.ones_like(psi))
                      if psi is not None else None)
        self.by_layer: dict[int, list[int]] = {}
        for k, tap in enumerate(taps):
            self.by_layer.setdefault(id(tap.layer), []).append(k)
        # A variable the batch-wise terms reach: one owned by a layer some psi-reached call belongs to.
        reached = {id(tap.layer) for k, tap in enumerate(taps) if self.g_psi is not None and self.g_psi[k] is not None}
        self.psi_reaches = ([id(recorder.owner.get(id(v))) in reached for v in self.variables]
                            if psi is not None else None)
        # One check for all calls (an assert per call was ~24 graph ops of every traced step). Traced, the
        # per-layer quantities wait for it (`_quantities`), so it fails before their reshapes would.
        self._rows_checked = []
        if taps:
            names = ", ".join(tap.layer.name for tap in taps)
            rows = tf.stack([tf.shape(tap.output)[0] for tap in taps])
            check = tf.debugging.assert_equal(
                rows % tf.maximum(tf.cast(batch_size, rows.dtype), 1), tf.zeros_like(rows),
                message=f"DP engine: a layer was called on a number of rows that is not a multiple of the batch "
                        f"size, so its gradient cannot be attributed to examples (rows modulo the batch size "
                        f"below, by layer call: {names})")
            self._rows_checked = [check] if check is not None else []  # None: eager, already checked
        self._cache: dict = {}
        # (term, layer id) -> the layer's instantiated kernel gradient per group (`GroupOuter`),
        # kept from the norm computations that chose the direct form (mixed ghost clipping):
        # the clipped sum of such a layer is then a [G]-weighted sum of them, not another
        # pass over its rows (Bu et al. 2022).
        self._instantiated: dict = {}
        # layer id -> positions per example of a factor layer, known from its calls' static shapes
        # (`_rows_per_example`), for the cost model when the batch size is not static (Poisson batches).
        self._positions: dict[int, int | None] = {}

    # -- per-layer per-example quantities -------------------------------------------------
    def _layer_factors(self, layer_id: int, grads: list[tf.Tensor]):
        """U [B, T, du], V [B, T, dv], bias rows [B, nb] or None for a factor-rule layer."""
        taps = self.recorder.taps
        us, vs, bias, per_row = [], [], None, []
        for k in self.by_layer[layer_id]:
            tap = taps[k]
            u, v = tap.rule.factors(tap, grads[k])
            per_row.append(u.shape[1])
            us.append(tf.reshape(u, [self.batch_size, -1, u.shape[-1]]))
            vs.append(tf.reshape(v, [self.batch_size, -1, v.shape[-1]]))
            if tap.rule.bias(tap.layer) is not None:
                rows = tap.rule.bias_rows(tap, grads[k])
                rows = tf.reduce_sum(tf.reshape(rows, [self.batch_size, -1, rows.shape[-1]]), axis=1)
                bias = rows if bias is None else bias + rows
        u = us[0] if len(us) == 1 else tf.concat(us, axis=1)
        v = vs[0] if len(vs) == 1 else tf.concat(vs, axis=1)
        self._positions[layer_id] = None if None in per_row else sum(per_row)
        return u, v, bias

    def _rows_per_example(self, layer_id: int, u: tf.Tensor) -> int | None:
        """A factor layer's positions per example for the choice of ghost or direct norms: static
        in U [B, T, du] when the batch size is, else the sum of its calls' positions per row (one
        row per example per call, the usual case). Only the cost depends on it: both forms are exact."""
        return u.shape[1] if u.shape[1] is not None else self._positions.get(layer_id)

    def _balanced_factors(self, which: str, layer_id: int) -> tuple[tf.Tensor, tf.Tensor]:
        """The layer's (U, V) for `which` term, balanced (cached: computed only for layers that need it)."""
        key = (which, layer_id)
        if key not in self._cache:
            u, v, _ = self._quantities(which)[layer_id][1]
            self._cache[key] = _balanced(u, v)
        return self._cache[key]

    def _layer_rows(self, layer_id: int, grads: list[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        """ids [B, T], values [B, T, w] of a row-sparse layer, its calls concatenated along T."""
        taps = self.recorder.taps
        ids, values = [], []
        for k in self.by_layer[layer_id]:
            i, v = taps[k].rule.rows(taps[k], grads[k])
            ids.append(tf.reshape(i, [self.batch_size, -1]))
            values.append(tf.reshape(v, [self.batch_size, -1, v.shape[-1]]))
        return tf.concat(ids, axis=1), tf.concat(values, axis=1)

    def _layer_per_example(self, layer_id: int, grads: list[tf.Tensor]) -> list[tf.Tensor]:
        """Per-example gradients [B, *w.shape] of a fallback layer, summed over its calls."""
        taps = self.recorder.taps
        total = None
        for k in self.by_layer[layer_id]:
            tap = taps[k]
            per = tap.rule.per_example(tap, grads[k], self.batch_size, self.recorder.original_call(tap.layer))
            total = per if total is None else [a + b for a, b in zip(total, per)]
        return total

    def _quantities(self, which: str):
        """Per-layer factors or per-example gradients for one kind of term, reached layers only."""
        if which not in self._cache:
            raw = self.g_phi if which == "phi" else self.g_psi
            outputs = [t.output for t in self.recorder.taps]
            grads = _zeros_if_none(raw, outputs)
            out = {}
            with tf.control_dependencies(self._rows_checked):
                for layer_id, ks in self.by_layer.items():
                    if all(raw[k] is None for k in ks):
                        continue
                    rule = self.recorder.taps[ks[0]].rule
                    if isinstance(rule, rules.FactorRule):
                        out[layer_id] = ("factor", self._layer_factors(layer_id, grads))
                    elif isinstance(rule, rules.RowSparseRule):
                        out[layer_id] = ("rows", self._layer_rows(layer_id, grads))
                    else:
                        out[layer_id] = ("dense", self._layer_per_example(layer_id, grads))
            self._cache[which] = out
        return self._cache[which]

    def _table(self, layer_id: int) -> tf.Variable:
        return self.recorder.layer_vars[layer_id][0]

    # -- norms ------------------------------------------------------------------------------
    def sample_sq_norms(self) -> tf.Tensor:
        total = tf.zeros([self.batch_size], self.dtype)
        for layer_id, (kind, q) in self._quantities("phi").items():
            if kind == "factor":
                u, v, bias = q
                rows = self._rows_per_example(layer_id, u)
                if rows is None or _ghost_pays(rows, u.shape[-1], v.shape[-1]):
                    total += _ghost_sq_norms(*self._balanced_factors("phi", layer_id))
                else:
                    outer = self._instantiated[("phi", layer_id)] = _group_outer(u, v)
                    total += _outer_sq_norms(outer.values)
                if bias is not None:
                    total += tf.reduce_sum(tf.square(bias), axis=1)
            elif kind == "rows":
                total += _row_sparse_sq_norms(*q, self._table(layer_id).shape[0])
            else:
                total += tf.add_n([row_sq_norms(g) for g in q])
        return total

    def partition_sq_norms(self) -> tf.Tensor:
        layout = self.layout
        total = tf.zeros([layout.num_partitions], self.dtype)
        for layer_id, (kind, q) in self._quantities("psi").items():
            if kind == "factor":
                u, v, bias = q
                rows = self.expected_rows * (self._rows_per_example(layer_id, u) or 1)
                if _ghost_pays(rows, u.shape[-1], v.shape[-1]):
                    u, v = self._balanced_factors("psi", layer_id)  # row-wise, so before grouping
                    ug = tf.reshape(layout.gather(u), [layout.num_partitions, -1, u.shape[-1]])
                    vg = tf.reshape(layout.gather(v), [layout.num_partitions, -1, v.shape[-1]])
                    total += _ghost_sq_norms(ug, vg)
                else:
                    outer = self._instantiated[("psi", layer_id)] = _partition_outer(u, v, layout)
                    total += _outer_sq_norms(outer.values)
                if bias is not None:
                    total += tf.reduce_sum(tf.square(tf.reduce_sum(layout.gather(bias), axis=1)), axis=1)
            elif kind == "rows":
                ids, values = q  # padded slots: index 0 with zero values, which adds nothing
                ids = tf.reshape(layout.gather(ids), [layout.num_partitions, -1])
                values = tf.reshape(layout.gather(values), [layout.num_partitions, -1, values.shape[-1]])
                total += _row_sparse_sq_norms(ids, values, self._table(layer_id).shape[0])
            else:
                for g in q:
                    summed = layout.sum_by_partition(g)
                    total += row_sq_norms(summed)
        return total

    def micro_sq_norms(self) -> tf.Tensor:
        """||grad phi_i + G||^2 with G the gradient of all batch-wise terms (one partition)."""
        total = self.sample_sq_norms()
        phi_q, psi_q = self._quantities("phi"), self._quantities("psi")
        shared = tf.zeros([], self.dtype)
        for layer_id, (kind, q_psi) in psi_q.items():
            q_phi = phi_q.get(layer_id, (kind, None))[1]
            if kind == "factor":
                u_psi, v_psi, b_psi = q_psi
                m = tf.einsum("bti,btj->ij", u_psi, v_psi)
                self._instantiated[("psi", layer_id)] = GroupOuter(m[None], False)  # micro: one partition
                shared += tf.reduce_sum(tf.square(m))
                mb = tf.reduce_sum(b_psi, axis=0) if b_psi is not None else None
                if mb is not None:
                    shared += tf.reduce_sum(tf.square(mb))
                if q_phi is None:
                    continue
                # Balanced: the cross term multiplies U_phi by M before V_phi (no inf * 0).
                u_phi, v_phi = self._balanced_factors("phi", layer_id)
                b_phi = q_phi[2]
                cross = tf.reduce_sum(tf.einsum("bti,ij->btj", u_phi, m) * v_phi, axis=[1, 2])
                if mb is not None:
                    cross += tf.linalg.matvec(b_phi, mb)
            elif kind == "rows":
                table = self._table(layer_id)
                m = tf.reshape(_row_sparse_sum(*q_psi, table), [table.shape[0], -1])
                shared += tf.reduce_sum(tf.square(m))
                if q_phi is None:
                    continue
                ids, values = q_phi  # <grad phi_i, M> = sum_t <g_t, M[id_t]>
                cross = tf.reduce_sum(values * tf.gather(m, ids), axis=[1, 2])
            else:
                cross = tf.zeros([self.batch_size], self.dtype)
                for j, g_psi in enumerate(q_psi):
                    m = tf.reduce_sum(g_psi, axis=0)
                    shared += tf.reduce_sum(tf.square(m))
                    if q_phi is not None:
                        cross += tf.reduce_sum(tf.reshape(q_phi[j] * m[None], [self.batch_size, -1]), axis=1)
            total += 2.0 * cross
        return total + shared

    # -- weighted sums ------------------------------------------------------------------------
    def _weighted_output_grad(self, pairs, select: bool = True) -> tuple[tf.Tensor, tf.Tensor]:
        """sum over (output gradient, per-example coefficient) pairs of the row-weighted gradient,
        rows with coefficient 0 exactly 0 (even if NaN/inf; `select=False`: 0 times their gradient,
        exactly 0 only where it is finite), and which rows count [R]."""
        g_w, alive = None, None
        for g, coef in pairs:
            if g is not None:
                row_coef = _row_coefficients(coef, tf.shape(g)[0], self.batch_size, g.shape.rank)
                term = tf.where(row_coef != 0.0, g * row_coef, 0.0) if select else g * row_coef
                g_w = term if g_w is None else g_w + term
                keep = tf.reshape(row_coef, [-1]) != 0.0
                alive = keep if alive is None else alive | keep
        return g_w, alive

    def _instantiated_sum(self, layer_id: int, c_phi: tf.Tensor, c_psi: tf.Tensor | None) -> tf.Tensor | None:
        """The layer's weighted kernel gradient [du, dv] from its instantiated per-group gradients.

        None unless every term reaching the layer had its gradients instantiated by a norm
        computation. Groups with coefficient 0 are selected away (exact 0 even if NaN/inf).
        """
        ks = self.by_layer[layer_id]
        parts = []
        for which, grads, coef in (("phi", self.g_phi, c_phi), ("psi", self.g_psi, c_psi)):
            if coef is None or grads is None or all(grads[k] is None for k in ks):
                continue
            outer = self._instantiated.get((which, layer_id))
            if outer is None:
                return None
            part = weighted_rows(coef, outer.values)
            parts.append(tf.transpose(part) if outer.transposed else part)
        return tf.add_n(parts) if parts else None

    def _bias_sum(self, layer_id: int, c_phi: tf.Tensor, psi_example: tf.Tensor | None) -> tf.Tensor:
        """A factor layer's weighted bias gradient [n_bias] from the per-example bias rows its norms used
        (all its calls summed), not from its weighted output gradients (a select over [R, T, d] per call).
        Examples with coefficient 0 are selected away; psi_example: each example's partition coefficient."""
        parts = []
        for which, coef in (("phi", c_phi), ("psi", psi_example)):
            q = self._quantities(which).get(layer_id) if coef is not None else None
            if q is not None and q[1][2] is not None:  # [B, n_bias]: the select costs what the sum does
                parts.append(_coef_sum(coef, mask_rows(q[1][2], coef != 0.0)))
        return tf.add_n(parts)

    def weighted(self, c_phi: tf.Tensor, c_psi: tf.Tensor | None, method: str = "bookkeeping") -> list[tf.Tensor]:
        """sum_i c_phi_i grad phi_i + sum_j c_psi_j grad psi_j, aligned with `variables`.

        A group with coefficient 0 contributes exactly 0, even if its quantities are NaN/inf.
        """
        if method == "reweight":
            zero = tf.UnconnectedGradients.ZERO
            targets, weights = [self.phi], [c_phi]
            if self.psi is not None and c_psi is not None:
                targets.append(self.psi)
                weights.append(c_psi)
            if len(targets) == 2 and not all(self.psi_reaches):
                # Variables psi does not reach get the phi sum alone, by construction (not by trusting the taps).
                reached = [v for v, r in zip(self.variables, self.psi_reaches) if r]
                unreached = [v for v, r in zip(self.variables, self.psi_reaches) if not r]
                both = iter(self.tape.gradient(targets, reached, output_gradients=weights, unconnected_gradients=zero))
                phi_only = iter(self.tape.gradient(self.phi, unreached, output_gradients=c_phi,
                                                   unconnected_gradients=zero))
                grads = [next(both) if r else next(phi_only) for r in self.psi_reaches]
            else:
                grads = self.tape.gradient(targets, self.variables, output_gradients=weights,
                                           unconnected_gradients=zero)
            grads = [tf.convert_to_tensor(g) for g in grads]  # an embedding's IndexedSlices: dense, as the sums below
            # A weight-0 group's backward pass is 0, or NaN where its activations are NaN/inf
            # (0 * inf): every VJP is linear in the weight, selections only route 0 or NaN, and
            # NaN survives sums. A finite result is therefore exact; otherwise the book-keeping
            # sum, which masks dropped rows, is used.
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
            for which in ("phi", "psi")[:len(weights)]:
                self._quantities(which)  # cached outside the cond's branches
            return tf.cond(finite, lambda: grads, lambda: self.weighted(c_phi, c_psi))
        taps = self.recorder.taps
        result = {}  # id(variable) -> its weighted sum (no annotation: AutoGraph cannot convert one here)

        def add(var, value):
            result[id(var)] = value if id(var) not in result else result[id(var)] + value

        use_psi = self.g_psi is not None and c_psi is not None
        psi_example = tf.gather(c_psi, self.layout.partition_ids) if use_psi else None
        fallback_done = set()
        from_instantiated: dict[int, bool] = {}  # layer id -> kernel sum taken from instantiated gradients
        for k, tap in enumerate(taps):
            rule = tap.rule
            g_phi = self.g_phi[k]
            g_psi = self.g_psi[k] if use_psi else None
            if g_phi is None and g_psi is None:
                continue
            if isinstance(rule, rules.FactorRule):
                layer_id = id(tap.layer)
                if layer_id not in from_instantiated:  # once per layer, for all its calls
                    kernel = self._instantiated_sum(layer_id, c_phi, c_psi if use_psi else None)
                    from_instantiated[layer_id] = kernel is not None
                    if kernel is not None:
                        for var, grad in zip(rule.kernels(tap.layer), rule.split_kernel(
                                tap.layer, rule.kernel_from_outer(tap.layer, kernel))):
                            add(var, grad)
                    bias = rule.bias(tap.layer)
                    if bias is not None:
                        add(bias, tf.reshape(self._bias_sum(layer_id, c_phi, psi_example), bias.shape))
                if from_instantiated[layer_id]:
                    continue
                # Rows of dropped examples may hold NaN/inf layer inputs or output gradients: the rule
                # zeroes their rows (not 0 * inf), always at one position per call (`_masked_always`),
                # else only if the plain sum is not finite.
                def kernel_sum(masked, t=tap, p=((g_phi, c_phi), (g_psi, psi_example))):
                    g_w, alive = self._weighted_output_grad(p, select=masked)
                    return t.rule.kernel_sum(t, g_w, alive if masked else None)
                kernel = (kernel_sum(True) if _masked_always(tap)
                          else _finite_or(kernel_sum(False), lambda: kernel_sum(True)))
                for var, grad in zip(rule.kernels(tap.layer), rule.split_kernel(tap.layer, kernel)):
                    add(var, grad)
            elif isinstance(rule, rules.RowSparseRule):
                def table_sum(masked, t=tap, p=((g_phi, c_phi), (g_psi, psi_example))):
                    return _row_sparse_sum(*t.rule.rows(t, self._weighted_output_grad(p, select=masked)[0]),
                                           t.rule.table(t.layer))
                add(rule.table(tap.layer), table_sum(True) if _masked_always(tap)
                    else _finite_or(table_sum(False), lambda: table_sum(True)))
            elif id(tap.layer) not in fallback_done:
                fallback_done.add(id(tap.layer))
                per_phi = self._quantities("phi").get(id(tap.layer), (None, None))[1]
                per_psi = self._quantities("psi").get(id(tap.layer), (None, None))[1] if use_psi else None
                for j, var in enumerate(self.recorder.layer_vars[id(tap.layer)]):
                    parts = []
                    if per_phi is not None:
                        parts.append(weighted_rows(c_phi, per_phi[j]))
                    if per_psi is not None:
                        parts.append(weighted_rows(psi_example, per_psi[j]))
                    if parts:
                        add(var, tf.add_n(parts))
        return [result.get(id(v), tf.zeros_like(v)) for v in self.variables]


class JacobianSums:
    """The engine's quantities from per-example (per-partition) gradients of the whole model.

    j_phi[k] is [B, *w_k.shape] (example i's grad phi_i), j_psi[k] is [P, *w_k.shape] or None.
    Subclasses differ only in how they obtain them.
    """

    variables: list[tf.Variable]
    batch_size: tf.Tensor
    j_phi: list[tf.Tensor]
    j_psi: list[tf.Tensor] | None
    psi_reaches: list[bool] | None  # per variable: False where every row of j_psi is 0 by construction

    def sample_sq_norms(self) -> tf.Tensor:
        return tf.add_n([row_sq_norms(j) for j in self.j_phi])

    def partition_sq_norms(self) -> tf.Tensor:
        return tf.add_n([row_sq_norms(j) for j in self.j_psi])

    def micro_sq_norms(self) -> tf.Tensor:
        total = self.sample_sq_norms()
        for jp, js in zip(self.j_phi, self.j_psi):
            m = tf.reduce_sum(js, axis=0)
            total += 2.0 * tf.reduce_sum(tf.reshape(jp * m[None], [self.batch_size, -1]), axis=1)
            total += tf.reduce_sum(tf.square(m))
        return total

    def weighted(self, c_phi: tf.Tensor, c_psi: tf.Tensor | None, method: str = "bookkeeping") -> list[tf.Tensor]:
        """sum_i c_phi_i grad phi_i + sum_j c_psi_j grad psi_j (`method` is irrelevant here).

        A row with coefficient 0 contributes exactly 0, even a dropped NaN/inf row (`weighted_rows`).
        """
        out = [weighted_rows(c_phi, j) for j in self.j_phi]
        if self.j_psi is not None and c_psi is not None:
            out = [o + weighted_rows(c_psi, j) if reach else o
                   for o, j, reach in zip(out, self.j_psi, self.psi_reaches)]
        return out


class VectorizedPass(JacobianSums):
    """Per-example (per-partition) gradients as Jacobians of the batch's [B] (and [P]) losses.

    Slow but general: also right for losses that differentiate through the model twice
    (gradient penalties), where the layer-local factorisation does not hold. pfor runs the
    backward pass of the whole batch once per row: O(B^2) work.
    """

    def __init__(self, variables: Sequence[tf.Variable], tape: tf.GradientTape, phi: tf.Tensor,
                 psi: tf.Tensor | None, layout: BatchLayout, batch_size: tf.Tensor, use_pfor: bool = True,
                 j_phi: Sequence[tf.Tensor] | None = None):
        """`j_phi`: phi's rows already taken (`jacobian(tape, phi, variables)[0]`), e.g. in the same
        backward passes as the inputs' rows (`DPGradientEngine.verify`)."""
        self.variables = list(variables)
        self.layout = layout
        self.batch_size = batch_size
        self.phi, self.psi = phi, psi
        self.j_phi = list(j_phi) if j_phi is not None else jacobian(tape, phi, self.variables, use_pfor)[0]
        self.j_psi, self.psi_reaches = (jacobian(tape, psi, self.variables, use_pfor) if psi is not None
                                        else (None, None))


def jacobian(tape: tf.GradientTape, values: tf.Tensor, variables: Sequence[tf.Variable],
             use_pfor: bool = True) -> tuple[list[tf.Tensor], list[bool]]:
    """[N, *w.shape] per variable: the gradient of each of the N `values` (zeros where `values` do
    not depend on the variable), and per variable whether they depend on it (in the traced graph).
    `use_pfor=False` takes one backward pass per row (for a few rows in eager mode, as `verify` has,
    faster than converting the backward pass for pfor: 1.8 s against 3.0 s for a transformer)."""
    with vectorized_conv_filter_gradients():
        rows = tape.jacobian(values, list(variables), unconnected_gradients=tf.UnconnectedGradients.NONE,
                             experimental_use_pfor=use_pfor)
    reaches = [r is not None for r in rows]
    n = tf.shape(values)[0]
    return [r if r is not None else tf.zeros(tf.concat([[n], tf.shape(v)], 0), v.dtype)
            for r, v in zip(rows, variables)], reaches
