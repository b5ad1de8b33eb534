-- zlink_trio Location Store, schema version 5: the multi-row aggregate owner change.
--
-- * change_owners(): a SpotWide User Spot and its member Actors move to one new owner in
--   ONE transaction (spec 06 §6.1): every (namespace, object_id, expected version) row
--   gets change_owner()'s effects, or none does. Returns one applied outcome per row in
--   the order given, or ONE conflict outcome: the current row of the first key, in that
--   order, that is Missing, at another version or not Ready (lost(): an Entry claim raises
--   ZL004). Then ZL001 for the new owner's lease, ZL002 when the new owner node cannot
--   take every row arriving from another NodeRid at once.
-- Same conventions as 0001; lock order nodes, then node_usage (by node_rid), then the
-- authority rows (by key: two batches never deadlock on each other).

CREATE FUNCTION @schema@.change_owners(
    p_ns text[], p_ids bytea[], p_expected bigint[],
    p_mesh bytea, p_rid bytea, p_node_generation bigint, p_lease_generation bigint
) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    n @schema@.nodes;
    u @schema@.node_usage;
    rid bytea;
    old_rids bytea[] := ARRAY[]::bytea[];
    leaving bytea[] := ARRAY[]::bytea[];
BEGIN
    -- 1. preconditions in the order given, on one snapshot, taking no lock (as
    --    change_owner's first read): a conflict returns before any fence or capacity rule.
    FOR c IN
        SELECT k.ns, k.oid, k.expected, a.kind, a.store_version, a.state, a.owner_rid
        FROM unnest(p_ns, p_ids, p_expected) WITH ORDINALITY AS k(ns, oid, expected, i)
        LEFT JOIN @schema@.authority a ON a.namespace = k.ns AND a.object_id = k.oid
        ORDER BY k.i
    LOOP
        IF c.kind IS NULL OR c.kind = 'entry_spot' OR c.store_version <> c.expected
                OR c.state <> 'ready' THEN
            RETURN QUERY SELECT * FROM @schema@.lost(c.ns, c.oid);
            RETURN;
        END IF;
        old_rids := old_rids || c.owner_rid;
    END LOOP;
    n := @schema@.require_lease(@schema@.store_now(), p_rid, p_node_generation,
                                p_lease_generation);
    -- 2. every counter involved, locked in node_rid order.
    FOR rid IN SELECT DISTINCT r FROM unnest(old_rids || p_rid) AS r ORDER BY r LOOP
        IF rid = p_rid THEN
            u := @schema@.lock_usage(rid);
        ELSE
            PERFORM @schema@.lock_usage(rid);
        END IF;
    END LOOP;
    -- 3. the rows, locked in key order, then checked again in the order given: a
    --    concurrent CAS that won meanwhile makes this a conflict, and nothing changed.
    PERFORM 1 FROM @schema@.authority a
    JOIN unnest(p_ns, p_ids) AS k(ns, oid) ON a.namespace = k.ns AND a.object_id = k.oid
    ORDER BY a.namespace, a.object_id
    FOR UPDATE OF a;
    FOR c IN
        SELECT k.ns, k.oid, k.expected, a.kind, a.store_version, a.state, a.owner_rid
        FROM unnest(p_ns, p_ids, p_expected) WITH ORDINALITY AS k(ns, oid, expected, i)
        LEFT JOIN @schema@.authority a ON a.namespace = k.ns AND a.object_id = k.oid
        ORDER BY k.i
    LOOP
        IF c.kind IS NULL OR c.kind = 'entry_spot' OR c.store_version <> c.expected
                OR c.state <> 'ready' THEN
            RETURN QUERY SELECT * FROM @schema@.lost(c.ns, c.oid);
            RETURN;
        END IF;
        IF c.owner_rid <> p_rid THEN
            leaving := leaving || c.owner_rid;
        END IF;
    END LOOP;
    IF cardinality(leaving) > 0 THEN
        IF u.active + u.pending + cardinality(leaving) > n.capacity THEN
            RAISE EXCEPTION 'node % is at capacity %', encode(p_rid, 'hex'), n.capacity
                USING ERRCODE = 'ZL002';
        END IF;
        UPDATE @schema@.node_usage s SET active = s.active - g.moved
        FROM (SELECT r, count(*) AS moved FROM unnest(leaving) AS r GROUP BY r) g
        WHERE s.node_rid = g.r;
        UPDATE @schema@.node_usage SET active = active + cardinality(leaving)
        WHERE node_rid = p_rid;
    END IF;
    RETURN QUERY
    WITH moved AS (
        UPDATE @schema@.authority a
        SET owner_mesh = p_mesh, owner_rid = p_rid, owner_node_generation = p_node_generation,
            owner_lease_generation = p_lease_generation,
            owner_generation = a.owner_generation + 1,
            relocation_id = NULL, relocation_mesh = NULL, relocation_rid = NULL,
            relocation_node_generation = NULL, relocation_lease_generation = NULL,
            relocation_sealed = NULL,
            store_version = nextval('@schema@.store_version_seq')
        FROM unnest(p_ns, p_ids) WITH ORDINALITY AS k(ns, oid, i)
        WHERE a.namespace = k.ns AND a.object_id = k.oid
        RETURNING k.i AS i, a AS row
    )
    SELECT 0::smallint, (m.row).* FROM moved m ORDER BY m.i;
END
$$;
