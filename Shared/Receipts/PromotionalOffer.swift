import Crypto
import Foundation
import JSONRPC

/// Subscription-offer signatures as StoreKit takes them, made with the subscription-offer key from App Store
/// Connect (ECDSA P-256): the original promotional-offer signature, and the JWS of Apple's newer API
/// (`promotional-offer`, `introductory-offer-eligibility`). The server signs (`fulfillment.signOffer`); the
/// App Store (here, the simulator) checks.
public enum PromotionalOffer {
    /// Apple accepts a signature for this long after its timestamp.
    public static let validityMs: Int64 = 24 * 3_600_000

    /// What the original signature covers: bundle id, key id, product id, offer id, application username (the
    /// appAccountToken, lowercase, or empty), nonce (lowercase UUID) and timestamp (ms), joined by U+2063.
    public static func message(
        bundleId: String, keyId: String, productId: String, offerId: String, appAccountToken: String, nonce: String, timestamp: Int64
    ) -> [UInt8] {
        let separator = "\u{2063}"
        return Array(
            [bundleId, keyId, productId, offerId, appAccountToken.lowercased(), nonce.lowercased(), String(timestamp)].joined(
                separator: separator
            ).utf8)
    }

    /// The original form: base64 of the DER ECDSA signature over `message` (SHA-256).
    public static func signature(_ message: [UInt8], key: P256.Signing.PrivateKey) throws -> String {
        try key.signature(for: SHA256.hash(data: message)).derRepresentation.base64EncodedString()
    }

    public static func isValidSignature(_ base64: String, message: [UInt8], key: P256.Signing.PublicKey) -> Bool {
        guard let der = Data(base64Encoded: base64), let signature = try? P256.Signing.ECDSASignature(derRepresentation: der) else {
            return false
        }
        return key.isValidSignature(signature, for: SHA256.hash(data: message))
    }

    /// A compact JWS (`alg: ES256`, `kid`, `typ: JWT`) with Apple's common claims (`iss`, `bid`, `aud`, `iat`
    /// in seconds, `nonce`) and the feature's own.
    public static func jws(
        audience: String, claims: [String: JSONValue], keyId: String, issuerId: String, bundleId: String, nonce: String, issuedAtMs: Int64,
        key: P256.Signing.PrivateKey
    ) throws -> String {
        var payload = claims
        payload["iss"] = .string(issuerId)
        payload["bid"] = .string(bundleId)
        payload["aud"] = .string(audience)
        payload["iat"] = .int(issuedAtMs / 1000)
        payload["nonce"] = .string(nonce)
        let header: JSONValue = ["alg": "ES256", "kid": .string(keyId), "typ": "JWT"]
        let input = base64URL(try JSONByteEncoder.encode(header)) + "." + base64URL(try JSONByteEncoder.encode(JSONValue.object(payload)))
        let signature = try key.signature(for: SHA256.hash(data: Array(input.utf8)))
        return input + "." + base64URL(Array(signature.rawRepresentation))
    }

    /// The header's `kid` and the claims of a compact ES256 JWS whose signature verifies with the key `kid`
    /// names (`key(kid)`); nil otherwise.
    public static func verifiedClaims(_ jws: String, key: (String) -> P256.Signing.PublicKey?) -> (keyId: String, claims: JSONValue)? {
        guard jws.utf8.count <= SignedPayloadVerifier.maxBytes else { return nil }
        let bytes = Array(jws.utf8)
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = SignedPayloadVerifier.base64URL(parts[0]),
            let payloadBytes = SignedPayloadVerifier.base64URL(parts[1]), let signatureBytes = SignedPayloadVerifier.base64URL(parts[2]),
            let header = try? JSONValue(parsing: headerBytes), header["alg"]?.stringValue == "ES256",
            let keyId = header["kid"]?.stringValue, let publicKey = key(keyId),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            publicKey.isValidSignature(signature, for: SHA256.hash(data: bytes[..<(parts[0].count + 1 + parts[1].count)])),
            let claims = try? JSONValue(parsing: payloadBytes), claims.objectValue != nil
        else { return nil }
        return (keyId, claims)
    }

    static func base64URL(_ bytes: [UInt8]) -> String { JWSSigningPKI.base64URL(bytes) }
}
