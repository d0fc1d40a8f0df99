import Crypto
import CryptoExtras
import Foundation
import Receipts
import SwiftASN1
import X509

/// The simulator's two chains (RSA for receipts, ECDSA P-256 for JWS), created on first start and kept in
/// the data directory (certificates as DER, private keys as DER with mode 0600) so receipts stay
/// verifiable across restarts.
public struct SimulatorPKI: Sendable {
    public let receipts: ReceiptSigningPKI
    public let signedPayloads: JWSSigningPKI

    public static func loadOrCreate(directory: URL) throws -> SimulatorPKI {
        let dir = directory.appendingPathComponent("sim-pki", isDirectory: true)
        if let existing = try? load(dir) { return existing }
        let pki = SimulatorPKI(receipts: try ReceiptSigningPKI.generate(), signedPayloads: try JWSSigningPKI.generate())
        try pki.save(dir)
        return pki
    }

    private static func load(_ dir: URL) throws -> SimulatorPKI {
        func bytes(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: dir.appendingPathComponent(name))) }
        func cert(_ name: String) throws -> Certificate { try Certificate(derEncoded: try bytes(name)) }
        let receipts = ReceiptSigningPKI(
            root: try cert("receipt-root.der"), intermediate: try cert("receipt-intermediate.der"), leaf: try cert("receipt-leaf.der"),
            leafKey: try _RSA.Signing.PrivateKey(derRepresentation: try bytes("receipt-leaf.key")),
            intermediateKey: try _RSA.Signing.PrivateKey(derRepresentation: try bytes("receipt-intermediate.key")))
        let jws = JWSSigningPKI(
            root: try cert("jws-root.der"), intermediate: try cert("jws-intermediate.der"), leaf: try cert("jws-leaf.der"),
            leafKey: try P256.Signing.PrivateKey(derRepresentation: try bytes("jws-leaf.key")))
        return SimulatorPKI(receipts: receipts, signedPayloads: jws)
    }

    private func save(_ dir: URL) throws {
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        func write(_ name: String, _ bytes: [UInt8], secret: Bool = false) throws {
            let url = dir.appendingPathComponent(name)
            try Data(bytes).write(to: url, options: .atomic)
            if secret { try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path) }
        }
        try write("receipt-root.der", Self.der(receipts.root))
        try write("receipt-intermediate.der", Self.der(receipts.intermediate))
        try write("receipt-leaf.der", Self.der(receipts.leaf))
        try write("receipt-leaf.key", Array(receipts.leafKey.derRepresentation), secret: true)
        try write("receipt-intermediate.key", Array(receipts.intermediateKey.derRepresentation), secret: true)
        try write("jws-root.der", Self.der(signedPayloads.root))
        try write("jws-intermediate.der", Self.der(signedPayloads.intermediate))
        try write("jws-leaf.der", Self.der(signedPayloads.leaf))
        try write("jws-leaf.key", Array(signedPayloads.leafKey.derRepresentation), secret: true)
    }

    public static func der(_ cert: Certificate) throws -> [UInt8] {
        var s = DER.Serializer()
        try s.serialize(cert)
        return s.serializedBytes
    }
}
