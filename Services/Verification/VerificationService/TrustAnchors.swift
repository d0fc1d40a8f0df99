import Crypto
import Foundation
import Receipts
import SwiftASN1
import X509

/// Operator-added roots: `--trust-anchor FILE` (repeatable) and `--trust-anchor-dir DIR`, where every
/// `*-root.der` / `*-root.pem` is trusted (a simulator's `sim-pki`, under Docker Compose's dev profile).
public enum TrustAnchors {
    public struct Unreadable: Error, CustomStringConvertible {
        public let path: String
        public let reason: String
        public var description: String { "\(path): not a readable DER or PEM certificate (\(reason))" }
    }

    /// The root files a directory holds, sorted; empty when it is missing or holds none.
    public static func rootFiles(in directory: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix("-root.der") || $0.hasSuffix("-root.pem") }.sorted().map { directory + "/" + $0 }
    }

    /// The SHA-256 of a certificate's DER, as colon-separated hex (what `openssl x509 -fingerprint -sha256` prints).
    public static func fingerprint(_ certificate: Certificate) -> String {
        var serializer = DER.Serializer()
        guard (try? serializer.serialize(certificate)) != nil else { return "unserializable" }
        return SHA256.hash(data: serializer.serializedBytes).map { String(format: "%02X", $0) }.joined(separator: ":")
    }

    /// Every certificate of `files`, in order; the first unreadable one is an error.
    public static func load(_ files: [String]) throws(Unreadable) -> [Certificate] {
        var out: [Certificate] = []
        for path in files {
            do {
                out.append(try ReceiptTrust.certificate(from: Array(Data(contentsOf: URL(fileURLWithPath: path)))))
            } catch {
                throw Unreadable(path: path, reason: "\(error)")
            }
        }
        return out
    }
}
