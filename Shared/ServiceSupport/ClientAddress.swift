#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What per-address limits count a client as (pure). An IPv4 address as it is; an IPv6 address by its /64, the
/// smallest network one subscriber is given: a single host with a /64 has 2^64 addresses, and keyed on each it would
/// pass every per-address limit (registrations, failed sign-ins, the edge's request buckets). An IPv4 address written
/// in IPv6 (`::ffff:a.b.c.d`) counts as that IPv4 address. Anything that is not an IP address is returned unchanged.
public enum ClientAddress {
    public static func limitKey(_ address: String) -> String {
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, address, &v6) == 1 else { return address }
        let b = withUnsafeBytes(of: &v6) { Array($0) }
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xff && b[11] == 0xff {
            return b[12..<16].map { String($0) }.joined(separator: ".")
        }
        let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(b[$0]) << 8 | UInt16(b[$0 + 1]), radix: 16) }
        return groups.joined(separator: ":") + "::/64"
    }
}
