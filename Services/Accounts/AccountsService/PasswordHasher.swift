import Crypto
import CryptoExtras
import Foundation
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceSupport

/// scrypt cost parameters. Stored with every hash so the cost can be raised later: a hash made with
/// older parameters still verifies, and is replaced on the next successful login.
public struct ScryptParameters: Sendable, Equatable {
    /// log2 of the CPU/memory cost N.
    public var logN: Int
    public var r: Int
    public var p: Int

    public init(logN: Int, r: Int, p: Int) {
        self.logN = logN
        self.r = r
        self.p = p
    }

    /// N = 2^14, r = 8, p = 1: 16 MiB and ~40 ms of one core per hash on the 2-core reference VM,
    /// scrypt's own recommendation for interactive logins. It is what keeps 10 concurrent logins on
    /// 2 cores near a 250 ms p99 (N = 2^15 measured 548 ms p99 there; see Benchmarks/HISTORY.md).
    /// OWASP's N = 2^17 costs 8x: raise `--scrypt-log-n` where cores allow; stored hashes upgrade
    /// on each account's next login.
    public static let `default` = ScryptParameters(logN: 14, r: 8, p: 1)

    /// Cheap parameters for tests only.
    public static let testing = ScryptParameters(logN: 10, r: 8, p: 1)

    var memoryBytes: Int { 128 * r * (1 << logN) * p + 1024 * 1024 }
}

/// Hashes and verifies passwords with scrypt on a dedicated thread pool, so a burst of logins neither
/// blocks the event loops nor runs more hashes at once than there are threads (which bounds memory).
///
/// Stored format (PHC-like): `scrypt$ln=15,r=8,p=1$<salt base64>$<hash base64>`.
///
/// The queue is bounded: past `maxPending` hashes waiting or running, a request fails at once with
/// `Busy` (answered as `rateLimited`) instead of joining an unbounded backlog.
public final class PasswordHasher: Sendable {
    private let parameters: ScryptParameters
    private let pool: NIOThreadPool
    private let maxPending: Int
    /// (waiting or running, scrypt derivations run so far)
    private let counters = NIOLockedValueBox((pending: 0, derivations: 0))
    private static let saltBytes = 16
    private static let hashBytes = 32

    /// The hasher's queue is full; retry later.
    public struct Busy: Error, Sendable {}

    public init(parameters: ScryptParameters, concurrency: Int, maxPending: Int = 64) {
        self.parameters = parameters
        self.pool = NIOThreadPool(numberOfThreads: max(1, concurrency))
        self.maxPending = max(1, maxPending)
        pool.start()
    }

    /// scrypt derivations run so far (hashes, verifications and equivalent work): what an attacker's
    /// guesses cost, for tests and metrics.
    public var derivations: Int { counters.withLockedValue { $0.derivations } }

    /// Runs `work` on the pool if the queue has room; counts it as one derivation.
    private func derivation<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        let admitted = counters.withLockedValue { c -> Bool in
            guard c.pending < maxPending else { return false }
            c.pending += 1
            c.derivations += 1
            return true
        }
        guard admitted else { throw Busy() }
        defer { counters.withLockedValue { $0.pending -= 1 } }
        return try await pool.runIfActive(work)
    }

    public func shutdown() async {
        try? await pool.shutdownGracefully()
    }

    /// A new salted hash of `password` with the current parameters.
    public func hash(_ password: String) async throws -> String {
        let parameters = self.parameters
        return try await derivation {
            var salt = [UInt8](repeating: 0, count: Self.saltBytes)
            var rng = SystemRandomNumberGenerator()
            for i in salt.indices { salt[i] = rng.next() }
            let derived = try Self.derive(password, salt: salt, parameters)
            return "scrypt$ln=\(parameters.logN),r=\(parameters.r),p=\(parameters.p)$"
                + Data(salt).base64EncodedString() + "$" + Data(derived).base64EncodedString()
        }
    }

    public struct Verdict: Sendable {
        public let matches: Bool
        /// The hash was made with other parameters than the current ones: store a new one.
        public let needsRehash: Bool
    }

    /// Checks `password` against a stored hash in constant time.
    public func verify(_ password: String, against stored: String) async throws -> Verdict {
        guard let parsed = Self.parse(stored) else { return Verdict(matches: false, needsRehash: true) }
        let current = self.parameters
        return try await derivation {
            let derived = try Self.derive(password, salt: parsed.salt, parsed.parameters)
            return Verdict(matches: SecretComparison.equal(derived, parsed.hash), needsRehash: parsed.parameters != current)
        }
    }

    /// Spends the same work as a real verification (for unknown usernames), so response times do not
    /// tell whether an account exists.
    public func burnEquivalentWork(_ password: String) async throws {
        let parameters = self.parameters
        _ = try await derivation {
            try Self.derive(password, salt: [UInt8](repeating: 0, count: Self.saltBytes), parameters)
        }
    }

    private static func derive(_ password: String, salt: [UInt8], _ p: ScryptParameters) throws -> [UInt8] {
        let key = try KDF.Scrypt.deriveKey(
            from: Array(password.utf8), salt: salt, outputByteCount: hashBytes,
            rounds: 1 << p.logN, blockSize: p.r, parallelism: p.p,
            maxMemory: p.memoryBytes)
        return key.withUnsafeBytes { Array($0) }
    }

    static func parse(_ stored: String) -> (parameters: ScryptParameters, salt: [UInt8], hash: [UInt8])? {
        let parts = stored.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "scrypt" else { return nil }
        var values: [String: Int] = [:]
        for kv in parts[1].split(separator: ",") {
            let pair = kv.split(separator: "=")
            guard pair.count == 2, let v = Int(pair[1]) else { return nil }
            values[String(pair[0])] = v
        }
        guard let logN = values["ln"], let r = values["r"], let p = values["p"], (1...22).contains(logN), (1...32).contains(r),
            (1...16).contains(p),
            let salt = Data(base64Encoded: String(parts[2])), let hash = Data(base64Encoded: String(parts[3]))
        else { return nil }
        return (ScryptParameters(logN: logN, r: r, p: p), Array(salt), Array(hash))
    }
}
