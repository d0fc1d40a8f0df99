import Crypto
import CryptoExtras
import Foundation
import Receipts
import ServiceSupport
import SwiftASN1
import X509

/// The simulator's two chains (RSA for receipts, ECDSA P-256 for JWS), created on first start and kept in
/// the data directory (certificates as DER, private keys as DER with mode 0600) so receipts stay
/// verifiable across restarts.
///
/// With `ocspURL` (given when the directory is first used), leaves and intermediates name that OCSP responder, as
/// Apple's do, and the issuers' keys are kept too so the simulator can answer OCSP about them. A directory made
/// without one keeps certificates without a responder (they are never checked online).
public struct SimulatorPKI: Sendable {
    public let receipts: ReceiptSigningPKI
    public let signedPayloads: JWSSigningPKI

    public static func loadOrCreate(directory: URL, ocspURL: String? = nil) throws -> SimulatorPKI {
        let dir = directory.appendingPathComponent("sim-pki", isDirectory: true)
        if let existing = try? load(dir) { return existing }
        var receiptOptions = ReceiptSigningPKI.Options()
        receiptOptions.ocspURL = ocspURL
        let pki = SimulatorPKI(
            receipts: try ReceiptSigningPKI.generate(receiptOptions), signedPayloads: try JWSSigningPKI.generate(ocspURL: ocspURL))
        try pki.save(dir)
        return pki
    }

    /// The OCSP responder URL the certificates carry, if any.
    public var ocspURL: String? {
        guard let access = try? signedPayloads.leaf.extensions.authorityInformationAccess else { return nil }
        for description in access where description.method == .ocspServer {
            if case .uniformResourceIdentifier(let url) = description.location { return url }
        }
        return nil
    }

    private static func load(_ dir: URL) throws -> SimulatorPKI {
        func bytes(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: dir.appendingPathComponent(name))) }
        func cert(_ name: String) throws -> Certificate { try Certificate(derEncoded: try bytes(name)) }
        // Issuer keys exist only in directories made since the simulator answers OCSP.
        let receiptRootKey = try? _RSA.Signing.PrivateKey(derRepresentation: try bytes("receipt-root.key"))
        let receipts = ReceiptSigningPKI(
            root: try cert("receipt-root.der"), intermediate: try cert("receipt-intermediate.der"), leaf: try cert("receipt-leaf.der"),
            leafKey: try _RSA.Signing.PrivateKey(derRepresentation: try bytes("receipt-leaf.key")),
            intermediateKey: try _RSA.Signing.PrivateKey(derRepresentation: try bytes("receipt-intermediate.key")), rootKey: receiptRootKey)
        let jws = JWSSigningPKI(
            root: try cert("jws-root.der"), intermediate: try cert("jws-intermediate.der"), leaf: try cert("jws-leaf.der"),
            leafKey: try P256.Signing.PrivateKey(derRepresentation: try bytes("jws-leaf.key")),
            intermediateKey: try? P256.Signing.PrivateKey(derRepresentation: try bytes("jws-intermediate.key")),
            rootKey: try? P256.Signing.PrivateKey(derRepresentation: try bytes("jws-root.key")))
        return SimulatorPKI(receipts: receipts, signedPayloads: jws)
    }

    private func save(_ dir: URL) throws {
        try PrivateFiles.directory(dir)
        func write(_ name: String, _ bytes: [UInt8], secret: Bool = false) throws {
            let url = dir.appendingPathComponent(name)
            if secret { try PrivateFiles.writeSecret(bytes, to: url) } else { try Data(bytes).write(to: url, options: .atomic) }
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
        if let key = receipts.rootKey { try write("receipt-root.key", Array(key.derRepresentation), secret: true) }
        if let key = signedPayloads.intermediateKey { try write("jws-intermediate.key", Array(key.derRepresentation), secret: true) }
        if let key = signedPayloads.rootKey { try write("jws-root.key", Array(key.derRepresentation), secret: true) }
    }

    public static func der(_ cert: Certificate) throws -> [UInt8] {
        var s = DER.Serializer()
        try s.serialize(cert)
        return s.serializedBytes
    }
}

/// The App Store Server API key the simulator issues (what App Store Connect's Keys page gives a team):
/// a P-256 key with its key id and the team's issuer id. Kept beside the PKI (`sim-pki/api-key.p8`, mode
/// 0600, and `api-key.json`), created on first start.
public struct SimulatorAPIKey: Sendable {
    public let keyId: String
    public let issuerId: String
    public let privateKey: P256.Signing.PrivateKey

    /// `name`: `api-key` (App Store Server API) or `offer-key` (subscription offers), kept in `sim-pki`.
    public static func loadOrCreate(directory: URL, name: String = "api-key") throws -> SimulatorAPIKey {
        let dir = directory.appendingPathComponent("sim-pki", isDirectory: true)
        struct Identity: Codable { var keyId: String; var issuerId: String }
        let keyFile = dir.appendingPathComponent("\(name).p8")
        let idFile = dir.appendingPathComponent("\(name).json")
        if let pem = try? String(contentsOf: keyFile, encoding: .utf8), let data = try? Data(contentsOf: idFile),
            let identity = try? JSONDecoder().decode(Identity.self, from: data)
        {
            return SimulatorAPIKey(
                keyId: identity.keyId, issuerId: identity.issuerId, privateKey: try P256.Signing.PrivateKey(pemRepresentation: pem))
        }
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        var rng = SystemRandomNumberGenerator()
        let made = SimulatorAPIKey(
            keyId: String((0..<10).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }),
            issuerId: UUID().uuidString.lowercased(), privateKey: P256.Signing.PrivateKey())
        try PrivateFiles.directory(dir)
        try PrivateFiles.writeSecret(Array(made.privateKey.pemRepresentation.utf8), to: keyFile)
        try JSONEncoder().encode(Identity(keyId: made.keyId, issuerId: made.issuerId)).write(to: idFile, options: .atomic)
        return made
    }
}
