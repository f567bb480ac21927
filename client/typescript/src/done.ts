/**
 * The window of event ids a Worker handled recently.
 * @internal
 * @module
 */

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * An event id as a key of the worker's maps and tables: a number while it
 * is a safe integer (in practice always: an id counts up per partition
 * from 1024), else the bigint; one id always gives the same key. (A number
 * indexes the tables below; a bigint would need a Set, whose look-up and
 * add took 0.30 µs here against 0.18-0.28 µs for a number.)
 * @internal
 */
export const keyOf = (id: bigint): number | bigint => (id <= MAX_SAFE ? Number(id) : id);

/**
 * A set of ids as numbers (safe integers): open addressing over a
 * Float64Array, with a bitmap of 8 bits a slot in front of it that answers
 * most look-ups of an id it does not hold; both are cleared and used again
 * rather than replaced.
 *
 * Written here rather than a JavaScript Set because of what a Set cost the
 * worker: adding 50,000 ids to a new Set and looking each one up took
 * 0.32-0.33 µs an id (its growth, and cache misses in its chained table),
 * a tenth of what the whole process spends on a quick handler's event;
 * this table took 0.04-0.2 µs (tests/bench/README.md, "The client
 * libraries' workers").
 */
class IdTable {
  private keys = new Float64Array(1024);  // 0: an empty slot
  private bits = new Uint8Array(1024);  // a bit per hash, 8 a slot
  private shift = 22;  // 32 - log2(keys.length)
  private zero = false;  // holds the id 0 (which marks an empty slot)
  private count = 0;

  get size(): number {
    return this.count;
  }

  has(k: number): boolean {
    if (k === 0) return this.zero;
    const h = IdTable.hash(k);
    const b = h >>> (this.shift - 3);
    if ((this.bits[b >>> 3] & (1 << (b & 7))) === 0) return false;
    const keys = this.keys;
    const mask = keys.length - 1;
    for (let i = h >>> this.shift; ; i = (i + 1) & mask) {
      const at = keys[i];
      if (at === k) return true;
      if (at === 0) return false;
    }
  }

  add(k: number): void {
    if (k === 0) {
      if (!this.zero) this.count++;
      this.zero = true;
      return;
    }
    if ((this.count + 1) * 2 > this.keys.length) this.grow();
    this.put(k);
  }

  /** Empties it; a table grown far past what it held shrinks. */
  clear(): void {
    if (this.keys.length > 1024 && this.count * 8 < this.keys.length) {
      this.resize(this.keys.length / 2);
    } else if (this.count > 0) {
      this.keys.fill(0);
      this.bits.fill(0);
    }
    this.zero = false;
    this.count = 0;
  }

  private put(k: number): void {
    const h = IdTable.hash(k);
    const b = h >>> (this.shift - 3);
    this.bits[b >>> 3] |= 1 << (b & 7);
    const keys = this.keys;
    const mask = keys.length - 1;
    for (let i = h >>> this.shift; ; i = (i + 1) & mask) {
      const at = keys[i];
      if (at === k) return;
      if (at === 0) {
        keys[i] = k;
        this.count++;
        return;
      }
    }
  }

  private grow(): void {
    const old = this.keys;
    this.resize(old.length * 2);
    this.count = this.zero ? 1 : 0;
    for (const k of old) {
      if (k !== 0) this.put(k);
    }
  }

  private resize(length: number): void {
    this.keys = new Float64Array(length);
    this.bits = new Uint8Array(length);
    this.shift = 32 - Math.log2(length);
  }

  /** A hash of both halves of a safe integer (Fibonacci hashing). */
  private static hash(k: number): number {
    const mixed = (k >>> 0) ^ Math.imul((k / 4294967296) >>> 0, 0x85ebca6b);
    return Math.imul(mixed, 0x9e3779b1) >>> 0;
  }
}

/**
 * Event ids handled recently: a repeat is acknowledged, not run again. Each
 * id is kept at least `windowMs`, unless more than `limit / 2` are added
 * after it meanwhile (then at least the latest `limit / 2` are kept); never
 * more than `limit` ids.
 *
 * Two generations of ids: the newer takes what is added, and once it is
 * `windowMs` old (or holds `limit / 2`) it becomes the older and the older
 * is dropped whole. (A queue of ids pruned one at a time from a map of
 * 100,000 cost 0.7-0.85 µs an event.) Ids past 2^53 are kept in Sets beside
 * each generation's table.
 * @internal
 */
export class Done {
  private ids = new IdTable();  // the newer generation
  private old = new IdTable();
  private big = new Set<bigint>();  // the newer generation's ids past 2^53
  private oldBig = new Set<bigint>();
  private turnAt = 0;  // when the newer becomes the older (ms, as now())
  private readonly half: number;

  constructor(private readonly windowMs: number, limit = 100_000) {
    this.half = Math.max(1, Math.floor(limit / 2));
  }

  /** Adds an id handled at `at` (ms, as now()). */
  add(id: bigint, at: number): void {
    this.addKey(keyOf(id), at);
  }

  /** add() of an id by its keyOf(). */
  addKey(k: number | bigint, at: number): void {
    if (typeof k === 'number') this.ids.add(k);
    else this.big.add(k);
    if (at >= this.turnAt || this.ids.size + this.big.size >= this.half) {
      const table = this.old;
      table.clear();
      this.old = this.ids;
      this.ids = table;
      this.oldBig = this.big;
      this.big = new Set();
      this.turnAt = at + this.windowMs;
    }
  }

  has(id: bigint): boolean {
    return this.hasKey(keyOf(id));
  }

  /** has() of an id by its keyOf(). */
  hasKey(k: number | bigint): boolean {
    if (typeof k === 'number') return this.ids.has(k) || this.old.has(k);
    return this.big.has(k) || this.oldBig.has(k);
  }

  /** How many ids it holds. */
  get size(): number {
    return this.ids.size + this.old.size + this.big.size + this.oldBig.size;
  }
}
