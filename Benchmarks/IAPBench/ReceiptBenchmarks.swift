import ArgumentParser
import Foundation
import Receipts
import SwiftASN1
import X509

/// Writes a receipt signed by a fresh Apple-shaped test PKI, and that PKI's root, so a
/// verification-service started with `--trust-anchor ROOT` can be driven with it (rpcload).
struct MintReceipt: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mint-receipt", abstract: "Mint a test receipt and write it (base64) with its trust anchor (DER).")

    @Option(help: "In-app purchases in the receipt.") var purchases = 5
    @Option(help: "sha256 or sha1.") var digest = "sha256"
    @Option(help: "Where to write the base64 receipt.") var receipt: String
    @Option(help: "Where to write the root certificate (DER).") var root: String

    func run() async throws {
        let pki = try ReceiptSigningPKI.generate()
        let bytes = try pki.sign(SampleReceipts.receipt(purchases: purchases, seed: 1), digest: digest == "sha1" ? .sha1 : .sha256)
        try Data(bytes).base64EncodedString().write(toFile: receipt, atomically: true, encoding: .utf8)
        var serializer = DER.Serializer()
        try serializer.serialize(pki.root)
        try Data(serializer.serializedBytes).write(to: URL(fileURLWithPath: root))
        print("receipt: \(bytes.count) bytes, \(purchases) purchases, \(digest); root: \(root)")
    }
}

/// A seeded mutation fuzzer for the receipt parser and verifier: starts from valid receipts (minted,
/// SHA-1 and SHA-256, 0-5 purchases, and the real Xcode fixtures when given), applies random
/// mutations, and runs each through the full verification. A crash, hang or runaway allocation stops it;
/// acceptance of a mutant whose payload changed is reported as a finding.
struct FuzzReceipts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fuzz-receipts", abstract: "Run N mutated receipts through parsing and verification.")

    @Option(help: "Mutated inputs to run.") var iterations = 1_000_000
    @Option(help: "Random seed (the run is reproducible for a seed).") var seed: UInt64 = 1
    @Option(help: "Directory of extra seed receipts (e.g. Tests/ReceiptsTests/Fixtures).") var corpus: String?

    func run() async throws {
        let pki = try ReceiptSigningPKI.generate()
        let verifier = ReceiptVerifier(
            trust: ReceiptTrust(
                roots: [pki.root],
                xcodeCertificate: ShippedTrust.certificate(ShippedTrust.storeKitTestDER)))
        var seeds: [[UInt8]] = []
        for n in 0...5 {
            seeds.append(try pki.sign(SampleReceipts.receipt(purchases: n, seed: n), digest: n % 2 == 0 ? .sha256 : .sha1))
        }
        if let corpus {
            for file in try FileManager.default.contentsOfDirectory(atPath: corpus) where file.hasSuffix(".receipt") {
                seeds.append(Array(try Data(contentsOf: URL(fileURLWithPath: corpus).appendingPathComponent(file))))
            }
        }
        var originals: [Receipt] = []
        for s in seeds {
            guard case .success(let v) = await verifier.verify(s, options: .init()) else { throw ValidationError("a seed does not verify") }
            originals.append(v.receipt)
        }
        var rng = SplitMix64(seed: seed)
        var outcomes: [String: Int] = [:]
        var findings = 0
        let start = Date()
        for i in 0..<iterations {
            let pick = Int(rng.next() % UInt64(seeds.count))
            let input = mutate(seeds[pick], &rng)
            let key: String
            switch await verifier.verify(input, options: .init()) {
            case .success(let v):
                // Only unsigned bytes may change without a refusal: the receipt must be the seed's.
                if v.receipt == originals[pick] {
                    key = "acceptedUnchanged"
                } else {
                    key = "FINDING"
                    findings += 1
                    if findings <= 5 { print("FINDING: seed \(pick), mutant \(Data(input).base64EncodedString())") }
                }
            case .failure(let f): key = f.rawValue
            }
            outcomes[key, default: 0] += 1
            if (i + 1) % 100_000 == 0 {
                print("\(i + 1) inputs, \(String(format: "%.0f", Date().timeIntervalSince(start))) s")
            }
        }
        let elapsed = Date().timeIntervalSince(start)
        print(
            String(
                format: "fuzz-receipts: %d mutated receipts in %.1f s (%.0f/s), seed %llu, no crash, %d findings",
                iterations, elapsed, Double(iterations) / elapsed, seed, findings))
        print("outcomes: \(outcomes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))")
        if findings > 0 { throw ExitCode(1) }
    }

    private func mutate(_ input: [UInt8], _ rng: inout SplitMix64) -> [UInt8] {
        var b = input
        for _ in 0..<(1 + Int(rng.next() % 4)) {
            guard !b.isEmpty else { return b }
            let i = Int(rng.next() % UInt64(b.count))
            switch rng.next() % 8 {
            case 0: b[i] ^= UInt8(1 << (rng.next() % 8))
            case 1: b[i] = UInt8(truncatingIfNeeded: rng.next())
            case 2: b = Array(b[..<i])
            case 3: b.remove(at: i)
            case 4: b.insert(UInt8(truncatingIfNeeded: rng.next()), at: i)
            case 5: b[i] = [0x00, 0x80, 0xFF, 0x30, 0x31, 0x04, 0x24, 0xA0][Int(rng.next() % 8)]  // ASN.1-significant bytes
            case 6:  // duplicate a slice (nested structures, repeated attributes)
                let n = min(b.count - i, Int(rng.next() % 64))
                b.insert(contentsOf: b[i..<(i + n)], at: i)
            default:  // lengths: turn a definite length into indefinite or a long form
                b[i] = [0x80, 0x81, 0x82, 0x84, 0x7F][Int(rng.next() % 5)]
            }
        }
        return b
    }
}

struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

enum SampleReceipts {
    static func receipt(purchases: Int, seed: Int) -> Receipt {
        var r = Receipt()
        r.receiptType = "ProductionSandbox"
        r.appItemId = 0
        r.bundleId = "com.example.game"
        r.applicationVersion = "3"
        r.opaqueValue = Array(0..<16)
        r.sha1Hash = Array(repeating: UInt8(seed), count: 20)
        r.creationDateMs = 1_772_366_400_000
        r.originalApplicationVersion = "1"
        r.inApp = (0..<purchases).map { i in
            var p = InAppPurchaseReceipt()
            p.quantity = 1
            p.productId = "coins.\(i)"
            p.transactionId = "\(2_000_000_000 + seed * 100 + i)"
            p.originalTransactionId = p.transactionId
            p.purchaseDateMs = 1_772_366_000_000 + Int64(i) * 1000
            p.originalPurchaseDateMs = p.purchaseDateMs
            p.productType = 1
            p.webOrderLineItemId = 0
            return p
        }
        return r
    }
}
