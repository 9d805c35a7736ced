/* SQLite workload on an in-memory database: n inserts into an indexed table
 * in one transaction, n/2 point selects by the indexed column, a GROUP BY
 * aggregate, an UPDATE over a range, and a DELETE.
 * Built against the amalgamation sqlite3.c from the libsqlite3-sys crate.
 * usage: sqlite-bench [n] */
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

static unsigned long long rng_state = 4242;
static unsigned long long rnd(void) {
    unsigned long long x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static void must(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    sqlite3 *db;
    must(sqlite3_open(":memory:", &db), db, "open");
    must(sqlite3_exec(db,
                      "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, grp INTEGER, v TEXT);"
                      "CREATE INDEX t_k ON t(k);",
                      NULL, NULL, NULL),
         db, "create");
    sqlite3_stmt *ins, *sel;
    must(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), db, "begin");
    must(sqlite3_prepare_v2(db, "INSERT INTO t(k, grp, v) VALUES(?, ?, ?)", -1, &ins, NULL), db,
         "prepare insert");
    char text[64];
    for (long i = 0; i < n; i++) {
        unsigned long long r = rnd();
        snprintf(text, sizeof text, "row-%ld-%llx", i, r & 0xffffff);
        sqlite3_bind_int64(ins, 1, (sqlite3_int64)(r % (unsigned long long)(n * 4)));
        sqlite3_bind_int(ins, 2, (int)(r >> 40) % 100);
        sqlite3_bind_text(ins, 3, text, -1, SQLITE_TRANSIENT);
        must(sqlite3_step(ins), db, "insert");
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    must(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), db, "commit");

    long long hits = 0;
    must(sqlite3_prepare_v2(db, "SELECT id, length(v) FROM t WHERE k = ?", -1, &sel, NULL), db,
         "prepare select");
    for (long i = 0; i < n / 2; i++) {
        sqlite3_bind_int64(sel, 1, (sqlite3_int64)(rnd() % (unsigned long long)(n * 4)));
        while (sqlite3_step(sel) == SQLITE_ROW)
            hits += sqlite3_column_int64(sel, 0) + sqlite3_column_int(sel, 1);
        sqlite3_reset(sel);
    }
    sqlite3_finalize(sel);

    long long agg = 0;
    must(sqlite3_prepare_v2(db, "SELECT grp, count(*), sum(k), max(v) FROM t GROUP BY grp ORDER BY 3 DESC",
                            -1, &sel, NULL),
         db, "prepare group");
    while (sqlite3_step(sel) == SQLITE_ROW)
        agg = agg * 31 + sqlite3_column_int64(sel, 1) + sqlite3_column_int64(sel, 2);
    sqlite3_finalize(sel);
    must(sqlite3_exec(db, "UPDATE t SET v = v || '-x' WHERE k < 100000; DELETE FROM t WHERE grp = 7;",
                      NULL, NULL, NULL),
         db, "update");
    must(sqlite3_prepare_v2(db, "SELECT count(*), total(length(v)) FROM t", -1, &sel, NULL), db,
         "prepare count");
    must(sqlite3_step(sel), db, "count");
    long long rows = sqlite3_column_int64(sel, 0);
    double len = sqlite3_column_double(sel, 1);
    sqlite3_finalize(sel);
    sqlite3_close(db);
    printf("sqlite n=%ld rows=%lld checksum=%lld/%lld/%.0f\n", n, rows, hits, agg, len);
    return 0;
}
