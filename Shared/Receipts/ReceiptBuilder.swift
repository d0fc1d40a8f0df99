import Crypto
import CryptoExtras
import SwiftASN1
import X509

/// Builds app receipts: the DER payload, and a PKCS#7 SignedData container signed with a given key
/// and chain, shaped like Apple's (no signed attributes, the signature over the payload's digest).
/// The simulator and the tests mint receipts with it.
public enum ReceiptBuilder {
    public enum Digest: Sendable {
        case sha1, sha256
        var oid: [UInt64] { self == .sha1 ? [1, 3, 14, 3, 2, 26] : [2, 16, 840, 1, 101, 3, 4, 2, 1] }
    }

    public enum SignatureOID: Sendable {
        /// Plain `rsaEncryption`, as many Apple receipts say.
        case rsaEncryption
        /// `sha1WithRSAEncryption` / `sha256WithRSAEncryption`, matching the digest.
        case withDigest
    }

    /// The payload: `SET OF ReceiptAttribute` with every field of `receipt` that is set.
    public static func payload(_ r: Receipt) -> [UInt8] {
        var attributes: [[UInt8]] = []
        func add(_ type: Int64, _ value: [UInt8]) {
            attributes.append(DERWriter.sequence([DERWriter.integer(type), DERWriter.integer(1), DERWriter.octetString(value)]))
        }
        func utf8(_ s: String) -> [UInt8] { DERWriter.tlv(0x0C, Array(s.utf8)) }
        func date(_ ms: Int64?) -> [UInt8] { DERWriter.tlv(0x16, Array((ms.map(ReceiptDate.format) ?? "").utf8)) }
        if let t = r.receiptType { add(0, utf8(t)) }
        if let id = r.appItemId { add(1, DERWriter.integer(id)) }
        add(2, r.bundleIdDER.isEmpty ? utf8(r.bundleId) : r.bundleIdDER)
        if let v = r.applicationVersion { add(3, utf8(v)) }
        add(4, r.opaqueValue)
        add(5, r.sha1Hash)
        if let d = r.creationDateMs { add(12, date(d)) }
        for p in r.inApp {
            var fields: [[UInt8]] = []
            func field(_ type: Int64, _ value: [UInt8]) {
                fields.append(DERWriter.sequence([DERWriter.integer(type), DERWriter.integer(1), DERWriter.octetString(value)]))
            }
            if let q = p.quantity { field(1701, DERWriter.integer(q)) }
            field(1702, utf8(p.productId))
            field(1703, utf8(p.transactionId))
            if p.purchaseDateMs != nil { field(1704, date(p.purchaseDateMs)) }
            if let o = p.originalTransactionId { field(1705, utf8(o)) }
            if p.originalPurchaseDateMs != nil { field(1706, date(p.originalPurchaseDateMs)) }
            if let t = p.productType { field(1707, DERWriter.integer(t)) }
            field(1708, date(p.expiresDateMs))
            if let w = p.webOrderLineItemId { field(1711, DERWriter.integer(w)) }
            field(1712, date(p.cancellationDateMs))
            if let t = p.isTrialPeriod { field(1713, DERWriter.integer(t ? 1 : 0)) }
            if let i = p.isInIntroOfferPeriod { field(1719, DERWriter.integer(i ? 1 : 0)) }
            if let o = p.promotionalOfferId { field(1721, utf8(o)) }
            add(17, DERWriter.set(fields))
        }
        if let d = r.originalPurchaseDateMs { add(18, date(d)) }
        if let v = r.originalApplicationVersion { add(19, utf8(v)) }
        if let d = r.expirationDateMs { add(21, date(d)) }
        return DERWriter.set(attributes)
    }

    /// The whole receipt file: ContentInfo { SignedData { payload, certificates, one SignerInfo } }.
    public static func sign(
        payload: [UInt8],
        key: _RSA.Signing.PrivateKey,
        signer: Certificate,
        certificates: [Certificate],
        digest: Digest = .sha256,
        signatureOID: SignatureOID = .rsaEncryption
    ) throws -> [UInt8] {
        let signature: _RSA.Signing.RSASignature
        switch digest {
        case .sha1: signature = try key.signature(for: Insecure.SHA1.hash(data: payload), padding: .insecurePKCS1v1_5)
        case .sha256: signature = try key.signature(for: SHA256.hash(data: payload), padding: .insecurePKCS1v1_5)
        }
        let digestAlgorithm = DERWriter.sequence([DERWriter.oid(digest.oid), DERWriter.null])
        let signatureAlgorithmOID: [UInt64]
        switch (signatureOID, digest) {
        case (.rsaEncryption, _): signatureAlgorithmOID = [1, 2, 840, 113549, 1, 1, 1]
        case (.withDigest, .sha1): signatureAlgorithmOID = [1, 2, 840, 113549, 1, 1, 5]
        case (.withDigest, .sha256): signatureAlgorithmOID = [1, 2, 840, 113549, 1, 1, 11]
        }
        var issuerSerializer = DER.Serializer()
        try issuerSerializer.serialize(signer.issuer)
        let issuerAndSerial = DERWriter.sequence([
            issuerSerializer.serializedBytes,
            DERWriter.tlv(0x02, Array(signer.serialNumber.bytes)),
        ])
        let signerInfo = DERWriter.sequence([
            DERWriter.integer(1), issuerAndSerial, digestAlgorithm,
            DERWriter.sequence([DERWriter.oid(signatureAlgorithmOID), DERWriter.null]),
            DERWriter.octetString(Array(signature.rawRepresentation)),
        ])
        let certs = try certificates.map { cert -> [UInt8] in
            var s = DER.Serializer()
            try s.serialize(cert)
            return s.serializedBytes
        }
        let signedData = DERWriter.sequence([
            DERWriter.integer(1),
            DERWriter.set([digestAlgorithm]),
            DERWriter.sequence([DERWriter.oid([1, 2, 840, 113549, 1, 7, 1]), DERWriter.tlv(0xA0, DERWriter.octetString(payload))]),
            DERWriter.tlv(0xA0, certs.flatMap { $0 }),
            DERWriter.set([signerInfo]),
        ])
        return DERWriter.sequence([DERWriter.oid([1, 2, 840, 113549, 1, 7, 2]), DERWriter.tlv(0xA0, signedData)])
    }
}

/// Minimal DER encoding for the receipt structures.
enum DERWriter {
    static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [tag]
        let n = content.count
        if n < 0x80 {
            out.append(UInt8(n))
        } else {
            var lengthBytes: [UInt8] = []
            var v = n
            while v > 0 { lengthBytes.insert(UInt8(v & 0xFF), at: 0); v >>= 8 }
            out.append(0x80 | UInt8(lengthBytes.count))
            out += lengthBytes
        }
        return out + content
    }

    static func sequence(_ items: [[UInt8]]) -> [UInt8] { tlv(0x30, items.flatMap { $0 }) }
    /// DER sorts SET OF members by their encodings.
    static func set(_ items: [[UInt8]]) -> [UInt8] { tlv(0x31, items.sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 }) }
    static func octetString(_ bytes: [UInt8]) -> [UInt8] { tlv(0x04, bytes) }
    static let null: [UInt8] = [0x05, 0x00]

    static func integer(_ value: Int64) -> [UInt8] {
        var bytes = withUnsafeBytes(of: value.bigEndian) { Array($0) }
        while bytes.count > 1 && ((bytes[0] == 0 && bytes[1] & 0x80 == 0) || (bytes[0] == 0xFF && bytes[1] & 0x80 != 0)) {
            bytes.removeFirst()
        }
        return tlv(0x02, bytes)
    }

    static func oid(_ arcs: [UInt64]) -> [UInt8] {
        var body: [UInt8] = [UInt8(arcs[0] * 40 + arcs[1])]
        for arc in arcs.dropFirst(2) {
            var chunk: [UInt8] = [UInt8(arc & 0x7F)]
            var v = arc >> 7
            while v > 0 { chunk.insert(UInt8(v & 0x7F) | 0x80, at: 0); v >>= 7 }
            body += chunk
        }
        return tlv(0x06, body)
    }
}

extension ReceiptDate {
    /// Unix milliseconds -> `2023-10-19T01:45:40Z` (the form receipts carry).
    public static func format(_ ms: Int64) -> String {
        format(ms, dateTimeSeparator: "T", zone: "Z")
    }

    /// Unix milliseconds -> `2023-10-19 01:45:40 Etc/GMT` (verifyReceipt's JSON form).
    public static func formatAppleGMT(_ ms: Int64) -> String {
        format(ms, dateTimeSeparator: " ", zone: " Etc/GMT")
    }

    static func format(_ ms: Int64, dateTimeSeparator: String, zone: String) -> String {
        let seconds = Int(ms.dividedReportingOverflow(by: 1000).partialValue - (ms % 1000 < 0 ? 1 : 0))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (y, m, d) = civilFromDays(days)
        // Written byte by byte, one allocation (interpolating eleven pieces was most of the cost of verifyReceipt's
        // date strings). Years as Swift prints them (four digits for every real receipt), the rest two digits.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(19 + zone.utf8.count)
        func two(_ v: Int) {
            bytes.append(UInt8(ascii: "0") + UInt8(v / 10))
            bytes.append(UInt8(ascii: "0") + UInt8(v % 10))
        }
        bytes += String(y).utf8
        bytes.append(UInt8(ascii: "-"))
        two(m)
        bytes.append(UInt8(ascii: "-"))
        two(d)
        bytes += dateTimeSeparator.utf8
        two(secondOfDay / 3600)
        bytes.append(UInt8(ascii: ":"))
        two(secondOfDay % 3600 / 60)
        bytes.append(UInt8(ascii: ":"))
        two(secondOfDay % 60)
        bytes += zone.utf8
        return String(decoding: bytes, as: UTF8.self)
    }

    static func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}
