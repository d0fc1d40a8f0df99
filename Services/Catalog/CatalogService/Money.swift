import Foundation
import JSONRPC

/// ISO 3166-1 alpha-3 codes, as the App Store names storefronts (`USA`, `DEU`, `JPN`).
/// Generated from the ISO 3166 tables (pycountry), 249 codes.
public enum Storefronts {
    public static let all: Set<String> = [
        "ABW", "AFG", "AGO", "AIA", "ALA", "ALB", "AND", "ARE", "ARG", "ARM", "ASM", "ATA", "ATF", "ATG", "AUS", "AUT",
        "AZE", "BDI", "BEL", "BEN", "BES", "BFA", "BGD", "BGR", "BHR", "BHS", "BIH", "BLM", "BLR", "BLZ", "BMU", "BOL",
        "BRA", "BRB", "BRN", "BTN", "BVT", "BWA", "CAF", "CAN", "CCK", "CHE", "CHL", "CHN", "CIV", "CMR", "COD", "COG",
        "COK", "COL", "COM", "CPV", "CRI", "CUB", "CUW", "CXR", "CYM", "CYP", "CZE", "DEU", "DJI", "DMA", "DNK", "DOM",
        "DZA", "ECU", "EGY", "ERI", "ESH", "ESP", "EST", "ETH", "FIN", "FJI", "FLK", "FRA", "FRO", "FSM", "GAB", "GBR",
        "GEO", "GGY", "GHA", "GIB", "GIN", "GLP", "GMB", "GNB", "GNQ", "GRC", "GRD", "GRL", "GTM", "GUF", "GUM", "GUY",
        "HKG", "HMD", "HND", "HRV", "HTI", "HUN", "IDN", "IMN", "IND", "IOT", "IRL", "IRN", "IRQ", "ISL", "ISR", "ITA",
        "JAM", "JEY", "JOR", "JPN", "KAZ", "KEN", "KGZ", "KHM", "KIR", "KNA", "KOR", "KWT", "LAO", "LBN", "LBR", "LBY",
        "LCA", "LIE", "LKA", "LSO", "LTU", "LUX", "LVA", "MAC", "MAF", "MAR", "MCO", "MDA", "MDG", "MDV", "MEX", "MHL",
        "MKD", "MLI", "MLT", "MMR", "MNE", "MNG", "MNP", "MOZ", "MRT", "MSR", "MTQ", "MUS", "MWI", "MYS", "MYT", "NAM",
        "NCL", "NER", "NFK", "NGA", "NIC", "NIU", "NLD", "NOR", "NPL", "NRU", "NZL", "OMN", "PAK", "PAN", "PCN", "PER",
        "PHL", "PLW", "PNG", "POL", "PRI", "PRK", "PRT", "PRY", "PSE", "PYF", "QAT", "REU", "ROU", "RUS", "RWA", "SAU",
        "SDN", "SEN", "SGP", "SGS", "SHN", "SJM", "SLB", "SLE", "SLV", "SMR", "SOM", "SPM", "SRB", "SSD", "STP", "SUR",
        "SVK", "SVN", "SWE", "SWZ", "SXM", "SYC", "SYR", "TCA", "TCD", "TGO", "THA", "TJK", "TKL", "TKM", "TLS", "TON",
        "TTO", "TUN", "TUR", "TUV", "TWN", "TZA", "UGA", "UKR", "UMI", "URY", "USA", "UZB", "VAT", "VCT", "VEN", "VGB",
        "VIR", "VNM", "VUT", "WLF", "WSM", "YEM", "ZAF", "ZMB", "ZWE",
    ]

    public static func check(_ code: String, field: String) throws(RPCError) {
        guard all.contains(code) else {
            throw RPCError.invalidParams(
                "\"\(code)\" is not an ISO 3166-1 alpha-3 storefront code (e.g. USA, DEU, JPN)",
                field: field, reason: "invalidStorefront")
        }
    }
}

/// ISO 4217 currencies and their minor units. Amounts are stored as integers of minor units and
/// travel as decimal strings: never floats.
public enum Currencies {
    public static let all: Set<String> = Set(Locale.commonISOCurrencyCodes)
    private static let zeroDecimal: Set<String> = [
        "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF",
        "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF",
    ]
    private static let threeDecimal: Set<String> = ["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"]

    public static func minorUnits(_ code: String) -> Int {
        zeroDecimal.contains(code) ? 0 : threeDecimal.contains(code) ? 3 : 2
    }

    public static func check(_ code: String, field: String) throws(RPCError) {
        guard all.contains(code) else {
            throw RPCError.invalidParams(
                "\"\(code)\" is not an ISO 4217 currency code (e.g. USD, EUR, JPY)",
                field: field, reason: "invalidCurrency")
        }
    }

    /// "0.99" in USD -> 99. Refuses negatives, signs, exponents, and more decimals than the currency has.
    public static func parseAmount(_ text: String, currency: String, field: String) throws(RPCError) -> Int64 {
        let digits = minorUnits(currency)
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        let valid =
            (parts.count == 1 || parts.count == 2)
            && !parts[0].isEmpty && parts[0].allSatisfy(\.isASCII) && parts[0].allSatisfy(\.isNumber)
            && (parts.count == 1 || (!parts[1].isEmpty && parts[1].count <= digits && parts[1].allSatisfy { $0.isASCII && $0.isNumber }))
            && parts[0].count <= 12
        guard valid, let whole = Int64(parts[0]) else {
            throw RPCError.invalidParams(
                "amount \"\(text)\" must be a decimal number with at most \(digits) decimals for \(currency)",
                field: field, reason: "invalidAmount")
        }
        var fraction = parts.count == 2 ? String(parts[1]) : ""
        while fraction.count < digits { fraction += "0" }
        var scale: Int64 = 1
        for _ in 0..<digits { scale *= 10 }
        return whole * scale + (Int64(fraction) ?? 0)
    }

    /// 99 in USD -> "0.99"; 120 in JPY -> "120".
    public static func formatAmount(_ minor: Int64, currency: String) -> String {
        let digits = minorUnits(currency)
        guard digits > 0 else { return String(minor) }
        var scale: Int64 = 1
        for _ in 0..<digits { scale *= 10 }
        let fraction = String(minor % scale)
        return "\(minor / scale)." + String(repeating: "0", count: digits - fraction.count) + fraction
    }

    /// For display, in the request's locale when given (`0,99 €` for de-DE), else the storefront's usual one.
    public static func display(_ minor: Int64, currency: String, locale: String?) -> String {
        let amount = Decimal(string: formatAmount(minor, currency: currency)) ?? 0
        let localeID = (locale ?? "en-US").replacingOccurrences(of: "-", with: "_")
        return amount.formatted(.currency(code: currency).locale(Locale(identifier: localeID)))
    }
}
